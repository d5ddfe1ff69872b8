"""compile_commands.json for clangd, from `ninja -t compdb`, with nvcc's command lines
rewritten into clang's CUDA dialect (clangd parses .cu files with clang, which rejects
nvcc-only flags such as -gencode or --expt-relaxed-constexpr).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .arch import CudaArch
from .ninja_file import write_if_changed

COMPILE_RULES = ("nvcc", "cxx")

# nvcc flags with no clang meaning, dropped. Those in _NVCC_ONLY_WITH_VALUE take a value,
# either as the next argument or after "=".
_NVCC_ONLY = {"--generate-dependencies-with-compile", "--expt-relaxed-constexpr", "--extended-lambda",
              "-G", "--device-debug", "-lineinfo", "--generate-line-info"}
_NVCC_ONLY_WITH_VALUE = {"--dependency-output", "-ccbin", "--compiler-bindir", "--threads", "-t",
                         "-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
                         "--gpu-code", "-Xptxas", "--ptxas-options", "-Xcudafe", "-Xnvlink"}
# nvcc passes these through to the host compiler; clang takes their payload directly.
_HOST_PASSTHROUGH = {"-Xcompiler", "--compiler-options"}


def rewrite_nvcc_args(args: Sequence[str], cuda_home: Path, archs: Sequence[CudaArch]) -> list[str]:
    """nvcc argv -> an equivalent clang++ argv for clangd (same includes, defines, standard)."""
    # --cuda-host-only: clangd parses one side; the host side sees all the code (device functions
    # included) and avoids libstdc++ headers clang cannot compile for nvptx.
    out = ["clang++", "-x", "cuda", "--cuda-host-only", f"--cuda-path={cuda_home}", "--no-cuda-version-check"]
    out += [f"--cuda-gpu-arch={a.sm}" for a in archs]
    i = 1  # skip nvcc itself
    while i < len(args):
        arg = args[i]
        key, has_value = arg.split("=", 1)[0], "=" in arg
        step = 1 if has_value or key not in (_NVCC_ONLY_WITH_VALUE | _HOST_PASSTHROUGH) else 2
        if key in _HOST_PASSTHROUGH:
            payload = arg.split("=", 1)[1] if has_value else (args[i + 1] if i + 1 < len(args) else "")
            out += [p for p in payload.split(",") if p]
        elif key not in _NVCC_ONLY and key not in _NVCC_ONLY_WITH_VALUE:
            out.append(arg)
        i += step
    return out


def write_compile_commands(
    ninja: str, build_dir: Path, cuda_home: Path, archs: Sequence[CudaArch], also_at: Path | None = None
) -> Path:
    raw = subprocess.run(
        [ninja, "-C", str(build_dir), "-t", "compdb", *COMPILE_RULES],
        capture_output=True, text=True, check=True,
    ).stdout
    entries = []
    for entry in json.loads(raw):
        args = shlex.split(entry.pop("command"))
        if Path(args[0]).name == "nvcc":
            args = rewrite_nvcc_args(args, cuda_home, archs)
        entry["arguments"] = args
        entries.append(entry)
    text = json.dumps(entries, indent=2) + "\n"
    path = build_dir / "compile_commands.json"
    write_if_changed(path, text)
    if also_at is not None:
        write_if_changed(also_at, text)  # the repo root, where clangd looks first
    return path
