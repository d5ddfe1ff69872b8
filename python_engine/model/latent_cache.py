"""The MLA latent cache of one request: per layer and token, `c` (kv_lora_rank values, after
kv_a_layernorm) followed by `k_pe` (qk_rope values, after RoPE). All heads share it.

Rows [0, length) are committed. A forward writes its new tokens at [length, length+T) and
advances length; after a tree verify, `compact` keeps the accepted rows contiguous.
"""

from __future__ import annotations

import torch


class LatentCache:
    def __init__(self, num_layers: int, latent_dim: int, dtype: torch.dtype, device, capacity: int = 256):
        self.num_layers = num_layers
        self.latent_dim = latent_dim
        self.rows = torch.zeros(num_layers, max(1, capacity), latent_dim, dtype=dtype, device=device)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.rows.shape[1]

    def reserve(self, total: int) -> None:
        """Make room for `total` rows, doubling so appends stay amortised O(1)."""
        if total <= self.capacity:
            return
        new_cap = max(total, 2 * self.capacity)
        grown = torch.zeros(self.num_layers, new_cap, self.latent_dim, dtype=self.rows.dtype, device=self.rows.device)
        grown[:, : self.length] = self.rows[:, : self.length]
        self.rows = grown

    def write(self, layer: int, start: int, latents: torch.Tensor) -> torch.Tensor:
        """Store latents [T, latent_dim] at rows start.. of `layer` and return that layer's
        rows [0, start+T) to attend over. Rows at or past `length` are scratch until
        `advance` commits them."""
        end = start + latents.shape[0]
        self.reserve(end)
        self.rows[layer, start:end] = latents.to(self.rows.dtype)
        return self.rows[layer, :end]

    def advance(self, count: int) -> None:
        self.length += count

    def compact(self, src: torch.Tensor | list, dst: torch.Tensor | list) -> None:
        """Move rows src[j] -> dst[j] in every layer, then truncate to dst[-1] + 1.
        src is increasing with src[j] >= dst[j]; gathering first makes the move safe."""
        src = torch.as_tensor(src, dtype=torch.long, device=self.rows.device)
        dst = torch.as_tensor(dst, dtype=torch.long, device=self.rows.device)
        if src.numel() == 0:
            return
        self.rows[:, dst] = self.rows[:, src].clone()
        self.length = int(dst[-1].item()) + 1

    def truncate(self, length: int) -> None:
        self.length = length

    def layer(self, layer: int) -> torch.Tensor:
        """Committed rows [length, latent_dim] of one layer (a view)."""
        return self.rows[layer, : self.length]

    def clone(self) -> "LatentCache":
        other = LatentCache.__new__(LatentCache)
        other.num_layers, other.latent_dim = self.num_layers, self.latent_dim
        other.rows = self.rows.clone()
        other.length = self.length
        return other
