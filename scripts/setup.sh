#!/usr/bin/env bash
# Set up a development environment in .venv: kdtree (editable) with its test extras.
# Safe to run again: it only installs what is missing. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# torch: the CPU build. On the project's machines `pip install torch==2.13.0` takes a file
# already on disk; an unpinned torch would download a multi-GB CUDA build instead.
TORCH_SPEC=${KDTREE_TORCH_SPEC:-torch==2.13.0}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: kdtree needs Python >= 3.11; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
  echo "       Set PYTHON=/path/to/python3.11 and run again." >&2
  exit 1
fi
step() { printf '\033[1m==> %s\033[0m\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  step "installing $TORCH_SPEC (CPU)"
  "${PIP[@]}" install -q "$TORCH_SPEC"
fi
step "installing kdtree and its test dependencies"
"${PIP[@]}" install -q -e '.[test]'
# Native builds: nvcc compiles here even without a GPU; cuBLAS comes from the toolkit or,
# where the toolkit has none, from the nvidia-cublas wheel (asked of kdtree's own discovery).
needs_cublas_wheel='
from kdtree_cli.native_build.toolchain import find_cuda, _cublas_in_toolkit
import sys
try:
    cuda = find_cuda()
except Exception:
    sys.exit(1)  # no CUDA toolkit: nothing native to build here
sys.exit(0 if _cublas_in_toolkit(cuda) is None else 1)'
if .venv/bin/python -c "$needs_cublas_wheel" 2>/dev/null; then
  step "the CUDA toolkit has no cuBLAS: installing the nvidia-cublas wheel"
  "${PIP[@]}" install -q -e '.[native]'
fi
# Several GPUs: NCCL's header for `kdtree build` (the engine opens the library at run time)
has_nccl='
from kdtree_cli.native_build.toolchain import find_cuda, find_nccl
import sys
sys.exit(0 if find_nccl(find_cuda()) else 1)'
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -gt 1 ] && ! .venv/bin/python -c "$has_nccl" 2>/dev/null; then
  step "$gpus GPUs and no NCCL: installing the nvidia-nccl wheel"
  "${PIP[@]}" install -q -e '.[gpus]'
fi
step "ready: .venv/bin/kdtree --help"
