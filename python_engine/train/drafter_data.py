"""Training data for the drafter, made by the target itself (self-distillation):

- sequences: a train-split prompt (lengths cycling through gen_prompt_lens, one length per
  generation batch) followed by the target's own greedy continuation to gen_seq_len tokens
  (float32 argmax), so the labels past the prompt are exactly the tokens DDTree must guess
  at T = 0;
- blocks: anchors a in the continuation; block = [token at a, mask x (B-1)], labels = the
  next B-1 tokens, context = the target's hidden states at target_layer_ids for 0..a-1.
"""

from __future__ import annotations

import numpy as np
import torch

from python_engine.train.progress import Progress
from python_engine.train.tokenizer import EOS_ID, MASK_ID


class LayerTaps:
    """Forward hooks that keep the residual stream after chosen decoder layers (the same
    tensor the reference engine's TargetOutput.hidden holds)."""

    def __init__(self, model, layer_ids):
        self.layer_ids = tuple(layer_ids)
        self.outputs: dict[int, torch.Tensor] = {}
        layers = model.model.layers
        self._hooks = [layers[i].register_forward_hook(self._keep(i)) for i in self.layer_ids]

    def _keep(self, i):
        def hook(module, args, output):
            self.outputs[i] = output[0] if isinstance(output, tuple) else output
        return hook

    def features(self) -> torch.Tensor:
        return torch.cat([self.outputs[i] for i in self.layer_ids], dim=-1)

    def remove(self):
        for h in self._hooks:
            h.remove()


@torch.no_grad()
def target_features(model, taps: LayerTaps, tokens: torch.Tensor, device) -> torch.Tensor:
    """[N, S, len(ids) * H] features of token sequences [N, S], in float32 like the engine
    computes them at inference (the target is small; TF32 keeps this cheap on a GPU)."""
    model(input_ids=tokens, use_cache=False, logits_to_keep=1)
    return taps.features().float()


@torch.no_grad()
def greedy_continuations(model, prompts: torch.Tensor, new_tokens: int, batch: int, progress: Progress,
                         time_budget_s: float | None = None, quiet: bool = False) -> torch.Tensor:
    """[n, P + new_tokens]: prompts [n, P] continued greedily by the target in float32,
    never stopping at EOS. A plain argmax loop over transformers' KV cache rather than
    generate(), whose logits processors and stopping rules vary between versions.
    With a time budget, stops after the last whole batch that fits (said in the log)."""
    import time

    from transformers import DynamicCache

    cache_kw = cache_argument_name(model)
    model.eval()
    out = []
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        if out and time_budget_s is not None:
            per_batch = (time.perf_counter() - t0) / len(out)
            if time.perf_counter() - t0 + per_batch > time_budget_s:
                progress.say(f"generation time budget {time_budget_s:.0f} s reached: keeping {i} of "
                             f"{len(prompts)} continuations")
                break
        seq = prompts[i : i + batch]
        cache = DynamicCache(config=model.config)  # filled in place by every forward
        logits = model(input_ids=seq, use_cache=True, logits_to_keep=1, **{cache_kw: cache}).logits
        while True:
            token = logits[:, -1].float().argmax(dim=-1, keepdim=True)  # lowest id on ties
            seq = torch.cat([seq, token], dim=1)
            if seq.shape[1] == prompts.shape[1] + new_tokens:
                break
            logits = model(input_ids=token, use_cache=True, **{cache_kw: cache}).logits
        out.append(seq)
        if not quiet:
            progress.say(f"generated {min(i + batch, len(prompts))}/{len(prompts)} continuations")
    return torch.cat(out)


def cache_argument_name(model) -> str:
    """transformers renamed forward's `past_key_values` to `cache` during 5.x."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def sample_blocks(seqs: torch.Tensor, prompt_len, anchors_per_seq: int, block_size: int,
                  generator: torch.Generator):
    """Anchors [N, A] in [prompt_len, S - B] (prompt_len an int or one per sequence),
    distinct per sequence and sorted; block tokens [N, A, B]; labels [N, A, B-1]."""
    N, S = seqs.shape
    B = block_size
    P = torch.as_tensor(prompt_len, dtype=torch.long).cpu().expand(N)
    lo, hi = int(P.min()), int(P.max())
    span = S - B - lo + 1
    A = min(anchors_per_seq, S - B - hi + 1)
    scores = torch.rand(N, span, generator=generator)
    # positions inside a sequence's own prompt score below every uniform draw
    scores[torch.arange(span)[None, :] < (P - lo)[:, None]] = -1.0
    anchors = scores.topk(A, dim=1).indices.sort(dim=1).values + lo
    anchors = anchors.to(seqs.device)
    offsets = torch.arange(B, device=seqs.device)
    idx = anchors[:, :, None] + offsets  # [N, A, B]
    window = torch.gather(seqs, 1, idx.reshape(N, -1)).view(N, A, B)
    blocks = torch.full_like(window, MASK_ID)
    blocks[:, :, 0] = window[:, :, 0]
    return anchors, blocks, window[:, :, 1:]


def make_prompts(stream: np.ndarray, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """[count, length] windows of a token stream, each starting with EOS (a document start,
    as the demo's prompts do)."""
    s = torch.from_numpy(stream.astype("int64"))
    starts = torch.randint(0, len(s) - length, (count,), generator=generator)
    body = s[starts[:, None] + torch.arange(length - 1)]
    return torch.cat([torch.full((count, 1), EOS_ID, dtype=torch.long), body], dim=1)


def generation_batches(prompt_lens, count: int, batch: int, progress: Progress, time_budget_s: float | None = None):
    """Yields (prompt length, batch size) for up to `count` continuations; batch i uses
    prompt_lens[i % len], so positions and prompt sizes vary as a user's requests do. With a
    time budget, stops after the last whole batch that fits (said in the log)."""
    import time

    made, i = 0, 0
    t0 = time.perf_counter()
    while made < count:
        if i and time_budget_s is not None:
            elapsed = time.perf_counter() - t0
            if elapsed + elapsed / i > time_budget_s:
                progress.say(f"generation time budget {time_budget_s:.0f} s reached after {made} of {count} "
                             "continuations")
                return
        P = prompt_lens[i % len(prompt_lens)]
        n = min(batch, count - made)
        yield P, n
        made += n
        i += 1
        progress.say(f"generated {made}/{count} continuations (prompt length {P}) in "
                     f"{time.perf_counter() - t0:.0f} s")


@torch.no_grad()
def distill_sequences(model, stream: np.ndarray, prompt_lens, seq_len: int, count: int, batch: int,
                      generator: torch.Generator, device, progress: Progress,
                      time_budget_s: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` sequences [n, seq_len] (prompt + greedy continuation, on `device`) and
    their prompt lengths [n] (CPU), in generation_batches."""
    seqs, lens = [], []
    for P, n in generation_batches(prompt_lens, count, batch, progress, time_budget_s):
        prompts = make_prompts(stream, n, P, generator).to(device)
        seqs.append(greedy_continuations(model, prompts, seq_len - P, n, progress, quiet=True))
        lens.append(torch.full((n,), P, dtype=torch.long))
    return torch.cat(seqs), torch.cat(lens)
