"""What a CPU bench's results record about the run that wrote them: the command, the commit,
the CPU and torch's threads, the date."""

from __future__ import annotations

import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from kdtree_cli.bench.gpu import git_commit
from python_engine.project import PROJECT_ROOT


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_run_record(argv: list[str] | None = None) -> dict:
    """{command, commit, device, date} of this run (the command as `kdtree ARGS`)."""
    import torch

    argv = list(sys.argv if argv is None else argv)
    return {"command": shlex.join(["kdtree", *argv[1:]]), "commit": git_commit(PROJECT_ROOT),
            "device": f"CPU {cpu_name()} ({platform.node()}), torch {torch.__version__}, "
                      f"{torch.get_num_threads()} thread(s)",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
