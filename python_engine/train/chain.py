"""The chain baseline: DDTree with budget B-1 and no branching, i.e. the drafter's top-1
token at every depth, exactly what plain DFlash speculative decoding verifies.

ChainDrafter wraps a drafter and keeps only its argmax per depth: every other logit is set
1e4 below it, so a tree of B-1 nodes is the depth-(B-1) chain (any branch would score about
-1e4) while the tree builder still sees finite numbers.
"""

from __future__ import annotations

import torch


class ChainDrafter:
    def __init__(self, inner):
        self.inner = inner
        self.name = f"{inner.name}-chain"
        self.block_size = inner.block_size
        self.target_layer_ids = inner.target_layer_ids

    def new_state(self):
        return self.inner.new_state()

    def draft(self, state, ctx_tokens, ctx_features, bonus: int, start: int, block_size: int) -> torch.Tensor:
        logits = self.inner.draft(state, ctx_tokens, ctx_features, bonus, start, block_size).float()
        top = logits.argmax(dim=-1, keepdim=True)
        chain = torch.full_like(logits, -1e4)
        return chain.scatter_(-1, top, 0.0)
