"""Small numeric building blocks shared by the target and the drafter, written to round
exactly where transformers rounds (the oracle the tests compare with)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers' DeepseekV3RMSNorm / Qwen3RMSNorm: normalise in float32,
    cast back to the input dtype, then scale by the weight."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """down(silu(gate x) * up x) with nn.Linear weight layouts ([out, in])."""
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)
