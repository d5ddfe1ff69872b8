"""Rotary position embedding exactly as transformers computes it for DeepSeek-V3: inverse
frequencies (default or YaRN) in float32, cos/sin scaled by the YaRN attention factor and
cast to the activation dtype, and the two layouts (rotate-half, or interleaved pairs).

The interleaved form writes its output de-interleaved (rotated evens, then rotated odds),
like transformers; q_pe and k_pe get the same permutation, so their dot product is the
interleaved-RoPE one. The latent cache stores k_pe in that output layout.
"""

from __future__ import annotations

import torch

from python_engine.model.config import RopeConfig, yarn_attention_factor, yarn_ramp_bounds


def inverse_frequencies(rope: RopeConfig, dim: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, float]:
    """(inv_freq [dim/2], attention_factor): transformers' default / yarn init, in float32
    like transformers; float64 serves the reference bundles, whose bytes must not depend on
    the CPU's float32 pow/cos implementation."""
    base = rope.theta
    if rope.rope_type == "default":
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=dtype) / dim)), 1.0

    factor = rope.factor
    attention_factor = yarn_attention_factor(rope)
    low, high = yarn_ramp_bounds(rope, dim)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=dtype) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp

    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=dtype) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, float(attention_factor)


class Rotary:
    """cos/sin tables on demand for a set of positions, and their application. The tables
    are computed in float32 (as transformers), or in float64 for a float64 model."""

    def __init__(self, rope: RopeConfig, dim: int, interleave: bool, device: torch.device,
                 model_dtype: torch.dtype = torch.float32):
        self.calc = torch.float64 if model_dtype == torch.float64 else torch.float32
        inv_freq, self.attention_factor = inverse_frequencies(rope, dim, self.calc)
        self.inv_freq = inv_freq.to(device)
        self.interleave = interleave

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, dim] for int positions [T], in `dtype` (one cast at the end)."""
        freqs = positions[:, None].to(self.calc) * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_factor
        sin = emb.sin() * self.attention_factor
        return cos.to(dtype), sin.to(dtype)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate x [T, ..., dim] with cos/sin [T, dim]; middle axes broadcast (heads)."""
        while cos.dim() < x.dim():
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        if self.interleave:
            half = cos.shape[-1] // 2
            c, s = cos[..., :half], sin[..., :half]
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin
