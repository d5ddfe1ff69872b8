"""What the decode loops need from a drafter (DFlash, or a test drafter).

Each round the loop hands the drafter the context committed since its last call (the tokens
and, for the target layers it asked for, the target's hidden states), the bonus token that
starts the block and the block's start position; the drafter returns one distribution per
future position: logits [block_size - 1, V] for positions start+1 .. start+block_size-1.
"""

from __future__ import annotations

from typing import Protocol

import torch


class Drafter(Protocol):
    name: str
    block_size: int  # default block size (D = block_size - 1 drafted positions)
    target_layer_ids: tuple[int, ...]  # target layers whose hidden states it reads

    def new_state(self) -> object:
        """Per-request state (e.g. the drafter's own K/V of the context)."""

    def draft(
        self,
        state: object,
        ctx_tokens: torch.Tensor,  # int64 [c]: tokens at positions start-c .. start-1
        ctx_features: torch.Tensor,  # [c, len(target_layer_ids) * hidden]
        bonus: int,
        start: int,
        block_size: int,
    ) -> torch.Tensor:
        """float32 logits [block_size - 1, V]."""
