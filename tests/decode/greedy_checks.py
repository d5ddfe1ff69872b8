"""Comparing two greedy continuations of the same target.

DDTree and AR compute the same logits through different batch shapes, so in floating
point a step whose two best tokens are (nearly) tied may legitimately flip. Equality is the
claim in exact arithmetic; a test accepts a divergence only where the target's two
candidates are within `rel_gap` of the logits' scale (a real bug shows large gaps).
"""

from __future__ import annotations

import torch


def same_or_near_tie(target, prompt: list[int], a: list[int], b: list[int], rel_gap: float) -> bool:
    j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if j is None:
        return len(a) == len(b)
    seq = prompt + a[:j]
    logits = target.forward(seq, torch.arange(len(seq)), target.new_cache()).logits[-1].float()
    gap = abs(float(logits[a[j]] - logits[b[j]]))
    print(f"divergence at step {j}: tokens {a[j]} vs {b[j]}, logit gap {gap:.3g}")
    return gap <= rel_gap * float(logits.abs().max())
