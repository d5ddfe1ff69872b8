"""Self-distillation data for a drafter of a random target: the demo's data (drafter_data.py)
with random-token prompts in place of corpus windows.

- random_prompts: token ids drawn uniformly from the whole vocabulary, as the decode tests
  and the native engine's checks draw theirs;
- distill_random: such prompts (lengths cycled per batch, as distill_sequences does) continued
  greedily by the target with batched_greedy, which keeps the target features of every
  position too, so training never runs the target again (it would dominate a CPU step);
- validation_set: the drafter_validation set built the same way.
"""

from __future__ import annotations

import torch

from python_engine.model.target import TargetModel
from python_engine.train.batched_greedy import greedy_with_features
from python_engine.train.drafter_data import generation_batches
from python_engine.train.drafter_validation import ValidationSet
from python_engine.train.progress import Progress


def random_prompts(count: int, length: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, vocab_size, (count, length), generator=generator)


def distill_random(target: TargetModel, layer_ids, prompt_lens, seq_len: int, count: int, batch: int,
                   generator: torch.Generator, progress: Progress, time_budget_s: float | None = None):
    """(sequences [n, seq_len], prompt lengths [n], features [n, seq_len - 1, F]) for up to
    `count` random prompts, in drafter_data.generation_batches."""
    seqs, lens, feats = [], [], []
    for P, n in generation_batches(prompt_lens, count, batch, progress, time_budget_s):
        prompts = random_prompts(n, P, target.cfg.vocab_size, generator)
        s, f = greedy_with_features(target, prompts, seq_len - P, layer_ids)
        seqs.append(s)
        feats.append(f)
        lens.append(torch.full((n,), P, dtype=torch.long))
    return torch.cat(seqs), torch.cat(lens), torch.cat(feats)


def validation_set(target: TargetModel, layer_ids, count: int, prompt_len: int, new_tokens: int, block_size: int,
                   generator: torch.Generator) -> ValidationSet:
    """`count` random prompts continued for new_tokens + block_size - 1 tokens (every anchor of
    a new_tokens request has its block's labels), with their features."""
    prompts = random_prompts(count, prompt_len, target.cfg.vocab_size, generator)
    seqs, feats = greedy_with_features(target, prompts, new_tokens + block_size - 1, layer_ids)
    return ValidationSet(seqs, feats, prompt_len, new_tokens)
