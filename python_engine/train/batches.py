"""Random training windows from a token stream, drawn with a seeded CPU generator so that a
seed gives the same batches on any device."""

from __future__ import annotations

import numpy as np
import torch

from python_engine.errors import KdtreeError


class WindowSampler:
    """Batches of `batch` windows of seq_len + 1 tokens (inputs and shifted labels)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch: int, seed: int, device):
        if len(tokens) < seq_len + 2:
            raise KdtreeError(f"token stream of {len(tokens)} tokens is shorter than one window ({seq_len + 1})")
        self.tokens = torch.from_numpy(tokens.astype(np.int64)).to(device)
        self.seq_len, self.batch = seq_len, batch
        self.generator = torch.Generator().manual_seed(seed)
        self._offsets = torch.arange(seq_len + 1, device=device)

    def windows(self, count: int | None = None) -> torch.Tensor:
        """int64 [count, seq_len + 1] at uniformly random starts."""
        n = self.batch if count is None else count
        starts = torch.randint(0, len(self.tokens) - self.seq_len - 1, (n,), generator=self.generator)
        return self.tokens[starts.to(self.tokens.device)[:, None] + self._offsets[None, :]]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.windows()
        return w[:, :-1], w[:, 1:]


def fixed_windows(tokens: np.ndarray, seq_len: int, count: int, seed: int) -> np.ndarray:
    """`count` non-random-per-call windows [count, seq_len + 1] (evaluation sets)."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(len(tokens) - seq_len - 1, size=count, replace=False))
    return np.stack([tokens[s : s + seq_len + 1].astype(np.int64) for s in starts])
