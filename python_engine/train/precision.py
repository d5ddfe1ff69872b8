"""TF32, switched for a block and restored after it: training runs faster with it; the
engine's evaluation and everything after a stage must run in true float32 (TF32 rounds the
tree verify and the one-token AR step differently enough to flip near-ties)."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def tf32(enabled: bool):
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
