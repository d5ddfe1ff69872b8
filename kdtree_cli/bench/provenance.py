"""What every `kdtree bench` JSON records about the run that wrote it: the command, the commit,
the device and the date (the `run` object), so that a result file says how to reproduce it
without a script or a README beside it."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from kdtree_cli.bench.gpu import git_commit
from python_engine.project import PROJECT_ROOT


def command_line(argv: list[str] | None = None) -> str:
    """The command as a user would type it: `kdtree ARGS` when the kdtree CLI runs (its script
    or `python -m kdtree_cli`), else the process's own argv."""
    argv = list(sys.argv if argv is None else argv)
    program = Path(argv[0]).as_posix() if argv else ""
    if program.endswith("/kdtree") or program == "kdtree" or program.endswith("kdtree_cli/__main__.py"):
        return shlex.join(["kdtree", *argv[1:]])
    return shlex.join(argv)


def cuda_device(gpus: int = 1) -> str:
    """The CUDA device's name ("2 x NVIDIA H200" for several), or why there is none."""
    try:
        import torch
    except ImportError:
        return "none (torch not installed)"
    if not torch.cuda.is_available():
        return "none (no CUDA device)"
    name = torch.cuda.get_device_name(0)
    return f"{gpus} x {name}" if gpus > 1 else name


def run_record(gpus: int = 1, root: Path = PROJECT_ROOT, argv: list[str] | None = None) -> dict:
    """{command, commit, device, date} of this run; commit honours $KDTREE_COMMIT (a copied tree's
    .git may be stale)."""
    return {"command": command_line(argv), "commit": git_commit(root), "device": cuda_device(gpus),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
