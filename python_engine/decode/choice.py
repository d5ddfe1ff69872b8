"""Posterior choice rules: the target's token at each verified position.

A rule maps target logits [N, V] to one token per row (numpy int64 [N]): the argmax at
T = 0 (lowest id on ties), an independent sample from softmax(logits / T) at T > 0. With
independent samples per tree node, DDTree's output is distributed exactly as AR sampling.
The decode loops take the rule as a parameter (DDTree also passes the tree, AR passes None)
so tests can inject a wrong rule and see the distribution test fail.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

ChoiceRule = Callable[[torch.Tensor, float, torch.Generator, Any], np.ndarray]


def greedy(logits: torch.Tensor) -> np.ndarray:
    # torch.argmax returns the first maximal index: the lowest token id on ties
    return torch.argmax(logits.float(), dim=-1).cpu().numpy().astype(np.int64)


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> np.ndarray:
    """One independent sample per row, drawn on the CPU so a seed reproduces on any device."""
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0].numpy().astype(np.int64)


def standard_choice(logits: torch.Tensor, temperature: float, generator: torch.Generator, tree=None) -> np.ndarray:
    return greedy(logits) if temperature <= 0 else sample(logits, temperature, generator)
