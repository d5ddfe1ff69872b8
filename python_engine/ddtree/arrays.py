"""Input coercion shared by the DDTree functions: numpy arrays or torch tensors in."""

from __future__ import annotations

import numpy as np


def as_numpy(x) -> np.ndarray:
    """A numpy view of x (torch tensors are detached and moved to the CPU)."""
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)
