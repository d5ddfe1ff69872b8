"""The `--threads N` option of the commands that run torch on the CPU (run, demo,
train-demo), and its default of one thread.

The models these commands run on a CPU are tiny: torch's intra-op threads only add
overhead to them, and on a shared machine they wait on every other busy process, which
makes tokens/s (and the demo's speedup over AR) a measure of the machine's load instead of
the decoding. One thread is the default; N threads is the user's choice.
"""

from __future__ import annotations

from typing import Annotated

import typer

DEFAULT_THREADS = 1

Threads = Annotated[int, typer.Option(
    "--threads", min=1, envvar="KDTREE_THREADS",
    help="CPU threads for torch (tiny models run best on one; a GPU run hardly uses them).")]


def use_threads(n: int) -> None:
    """Set torch's intra-op thread count (imports torch)."""
    import torch

    torch.set_num_threads(n)
