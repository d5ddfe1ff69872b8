"""The drafter's validation: what the engine's T = 0 evaluation will measure, on prompts it
will look like.

The set: prompts from the held-out files (as the evaluation draws them, with another seed),
each continued greedily by the target for new_tokens + B - 1 tokens, in true float32 (no
TF32), like the engine's AR run. Every anchor of the eval's span is drafted with the
training forward (on the weights rounded to the dtype the drafter is saved in), and
acceptance_sim turns the drafts into the engine's rounds. So `chain_tau` and `tau_budget`
are the engine's chain and budget-B tau on these prompts, not estimates (up to float ties;
tests/demo/test_drafter_real_context.py checks it round by round), while
`chain_tau_uniform` (1 + leading correct drafts, averaged over every anchor; the old
"chain_tau_estimate") is kept to show how far a per-anchor mean sits from tau.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from python_engine.decode.result import tau
from python_engine.train.acceptance_sim import draft_topk, sequence_rounds
from python_engine.train.precision import tf32
from python_engine.train.tokenizer import MASK_ID


@dataclass
class ValidationSet:
    seqs: torch.Tensor  # int64 [N, S]: prompt, then the target's greedy tokens
    features: torch.Tensor  # [N, S, len(ids) * H] float32
    prompt_len: int
    new_tokens: int  # the eval's request length: rounds anchor at prompt_len .. prompt_len+new_tokens-2


@contextmanager
def saved_precision(model: torch.nn.Module, dtype: torch.dtype):
    """The model's weights rounded to `dtype` (as save_drafter writes them) for the block."""
    if dtype == torch.float32:
        yield
        return
    keep = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(p.dtype))
    try:
        yield
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(keep[name])


@torch.no_grad()
def build_validation_set(target, taps, prompts: torch.Tensor, new_tokens: int, block_size: int,
                         progress) -> ValidationSet:
    from python_engine.train.drafter_data import greedy_continuations, target_features

    with tf32(False):  # the engine's evaluation runs in true float32
        seqs = greedy_continuations(target, prompts, new_tokens + block_size - 1, len(prompts), progress, quiet=True)
        features = target_features(target, taps, seqs, seqs.device)
    return ValidationSet(seqs, features, prompts.shape[1], new_tokens)


@torch.no_grad()
def anchor_logits(model, features: torch.Tensor, seqs: torch.Tensor, first: int, count: int, embed: torch.Tensor,
                  lm_head: torch.Tensor, chunk: int = 48) -> torch.Tensor:
    """Training-forward logits [n, count, B-1, V] of the blocks anchored at first ..
    first+count-1 of sequences [n, S] (features [n, S, F])."""
    B = model.cfg.block_size
    n = seqs.shape[0]
    out = []
    for lo in range(first, first + count, chunk):
        anchors = torch.arange(lo, min(lo + chunk, first + count), device=seqs.device).expand(n, -1)
        blocks = torch.full((*anchors.shape, B), MASK_ID, dtype=torch.long, device=seqs.device)
        blocks[:, :, 0] = torch.gather(seqs, 1, anchors)
        out.append(model(features, anchors, blocks, embed, lm_head).float())
    return torch.cat(out, dim=1)


@torch.no_grad()
def validate(model, vs: ValidationSet, embed: torch.Tensor, lm_head: torch.Tensor, weights: torch.Tensor,
             budget: int, saved_dtype: torch.dtype = torch.bfloat16, group: int = 8) -> dict:
    """Loss and per-depth accuracy over every anchor of the eval's span, and the engine's
    rounds (chain and DDTree with `budget` nodes) on the validation prompts."""
    was_training = model.training
    model.eval()
    B = model.cfg.block_size
    D, P, T = B - 1, vs.prompt_len, vs.new_tokens
    A = T  # anchors P .. P+T-1: the walk's (P .. P+T-2) and one more for the per-anchor stats
    ce_sum, correct_sum, uniform, chain, tree = 0.0, torch.zeros(D), [], [], []
    offsets = torch.arange(A, device=vs.seqs.device)[:, None] + 1 + torch.arange(D, device=vs.seqs.device)
    with tf32(False), saved_precision(model, saved_dtype):
        for g0 in range(0, len(vs.seqs), group):
            seqs, feats = vs.seqs[g0 : g0 + group], vs.features[g0 : g0 + group]
            logits = anchor_logits(model, feats, seqs, P, A, embed, lm_head)  # [n, A, D, V]
            labels = seqs[:, P + offsets]  # [n, A, D]
            ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
            ce_sum += float((ce * weights).sum())
            top1 = logits.argmax(dim=-1)
            correct = top1 == labels
            correct_sum += correct.float().sum(dim=(0, 1)).cpu()
            uniform += (1 + correct.int().cumprod(dim=-1).sum(dim=-1)).flatten().tolist()
            top1_np = top1.cpu().numpy()
            logp, tok = draft_topk(logits, budget)
            for i, seq in enumerate(seqs.cpu().numpy()):
                chain += sequence_rounds(seq, P, T, top1_np[i])
                tree += sequence_rounds(seq, P, T, top1_np[i], (logp[i], tok[i]), budget)
    model.train(was_training)
    n_blocks = len(vs.seqs) * A
    chain_np = np.asarray(chain)
    return {
        "loss": ce_sum / (n_blocks * D),  # position-weighted, as the training loss
        "depth_accuracy": [round(float(a), 4) for a in correct_sum / n_blocks],
        "chain_tau_uniform": float(np.mean(uniform)),
        "chain_tau": tau(chain),
        "chain_acc1": float((chain_np >= 2).mean()),  # the eval's chain depth-1 acceptance
        "tau_budget": tau(tree),
    }
