"""TEST DRAFTER (not DFlash): drafts by running the target itself, so it agrees with the
target often. It exists so the tests can assert long acceptance paths (multi-node accept,
non-trivial cache compaction), which a random DFlash drafter almost never produces.

It keeps its own latent cache of the committed context; each round it decodes the block
greedily from the bonus token with the target, adding Gaussian noise (std `noise`) to the
logits so that it is sometimes wrong, and returns those noisy logits as its drafts. It
ignores the context features (target_layer_ids is empty) and implements the same
interface as DFlashDrafter (python_engine/model/drafter_base.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from python_engine.model.latent_cache import LatentCache
from python_engine.model.target import TargetModel


@dataclass
class OracleState:
    cache: LatentCache
    generator: torch.Generator


class TargetOracleDrafter:
    target_layer_ids: tuple[int, ...] = ()

    def __init__(self, target: TargetModel, block_size: int = 5, noise: float = 1.0, seed: int = 0):
        self.target = target
        self.block_size = block_size
        self.noise = noise
        self.seed = seed
        self.name = f"oracle-noise{noise:g}"

    def new_state(self) -> OracleState:
        return OracleState(self.target.new_cache(), torch.Generator().manual_seed(self.seed))

    @torch.no_grad()
    def draft(self, state: OracleState, ctx_tokens, ctx_features, bonus: int, start: int, block_size: int):
        target, cache = self.target, state.cache
        c = int(ctx_tokens.numel())
        if c:
            target.forward(ctx_tokens, torch.arange(start - c, start), cache)
        committed = cache.length
        rows, token = [], int(bonus)
        for d in range(block_size - 1):
            logits = target.forward([token], [start + d], cache).logits[0].cpu()
            noisy = logits + self.noise * torch.randn(logits.shape, generator=state.generator)
            rows.append(noisy)
            token = int(noisy.argmax())
        cache.truncate(committed)  # the drafted rows were scratch
        if not rows:
            return torch.zeros(0, target.cfg.vocab_size)
        return torch.stack(rows)
