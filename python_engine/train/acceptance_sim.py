"""The engine's T = 0 tau on a known greedy continuation, from teacher-forced drafter logits
instead of the decode loop.

At T = 0 the target's continuation is fixed, and the drafter's block at anchor a depends
only on the tokens and target features of positions 0..a-1 and on the token at a (the
bonus). So the training forward's logits at every anchor are the drafts the engine makes if
a round starts there, and the engine's rounds are a renewal walk: the first round anchors at
the prompt's end P, a round at a accepts L(a) tokens (root included), the next anchors at
a + L(a), and the loop stops once new_tokens are out. Its tau (tokens per round) is a
harmonic-type mean of L along the text: hard stretches get many short rounds, easy ones few
long ones. The mean of L over uniformly drawn anchors weighs every position once and
overstates tau whenever L varies along the text (on the demo pair's held-out eval: 3.04 vs
the engine's 1.87 for the chain).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from python_engine.ddtree import accept_walk, build_tree


def draft_topk(logits: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-depth top-k of log_softmax(logits [..., V]) in topk_logprobs' order (descending,
    lower token id first on ties), computed on the logits' device: float32 logp and int64
    tokens [..., k] on the CPU."""
    k = min(k, logits.shape[-1])
    logp = torch.log_softmax(logits.double(), dim=-1).float()  # float64 math, one rounding
    values, ids = torch.topk(logp, k, dim=-1)
    values, ids = values.cpu().numpy(), ids.cpu().numpy().astype(np.int64)
    order = np.lexsort((ids, -values), axis=-1)
    return np.take_along_axis(values, order, -1), np.take_along_axis(ids, order, -1)


def chain_accept(top1: np.ndarray, truth: np.ndarray) -> int:
    """Accepted tokens (root included) of the chain: 1 + leading drafts equal to the truth."""
    n = min(len(top1), len(truth))
    wrong = np.flatnonzero(top1[:n] != truth[:n])
    return 1 + (int(wrong[0]) if len(wrong) else n)


def tree_accept(logp: np.ndarray, tok: np.ndarray, truth: np.ndarray, budget: int, root: int) -> int:
    """Accepted tokens (root included) of DDTree with `budget` nodes built from per-depth
    top-k (logp, tok) [D, k] when the target's greedy tokens after the root are `truth`."""
    tree = build_tree(logp, tok, budget, root_token=root)
    # the target's choice at a node of depth d on the true path is the true token at depth
    # d + 1; off the path the walk never asks, so any value will do
    padded = np.concatenate([np.asarray(truth, dtype=np.int64), np.full(1, -1, dtype=np.int64)])
    choice = padded[np.minimum(tree.depth.astype(np.int64), len(truth))]
    return len(accept_walk(tree, choice)[0])


def renewal_walk(first: int, end: int, accept_at: Callable[[int], int]) -> list[int]:
    """Accept lengths of the rounds the decode loop makes: anchors first, first + L, ...
    while the anchor is < end (= P + new_tokens - 1: the loop stops once new_tokens are out)."""
    rounds, a = [], first
    while a < end:
        n = accept_at(a)
        rounds.append(n)
        a += n
    return rounds


def sequence_rounds(seq: np.ndarray, first: int, new_tokens: int, top1: np.ndarray,
                    topk: tuple[np.ndarray, np.ndarray] | None = None, budget: int | None = None) -> list[int]:
    """The rounds of one request (prompt = seq[:first], then new_tokens greedy tokens) from
    the drafts of the blocks anchored at first, first+1, ...: top1 [A, D] for the chain
    (budget None) or topk = (logp, tok) [A, D, k] for a tree of `budget` nodes. seq must run
    D tokens past the last round's anchor (len >= first + new_tokens + D - 1)."""
    D = top1.shape[1]
    if len(seq) < first + new_tokens + D - 1 or len(top1) < new_tokens - 1:
        raise ValueError("sequence or drafts too short for the walk")

    def accept_at(a: int) -> int:
        truth = seq[a + 1 : a + 1 + D]
        if budget is None:
            return chain_accept(top1[a - first], truth)
        return tree_accept(topk[0][a - first], topk[1][a - first], truth, budget, int(seq[a]))

    return renewal_walk(first, first + new_tokens - 1, accept_at)
