"""Training data for the drafter, made by the target itself (self-distillation):

- sequences: a train-split prompt followed by the target's own greedy continuation
  (transformers' generate, float32), so the labels past the prompt are exactly the tokens
  DDTree must guess at T = 0;
- blocks: anchors a in the continuation; block = [token at a, mask x (B-1)], labels = the
  next B-1 tokens, context = the target's hidden states at target_layer_ids for 0..a-1.
"""

from __future__ import annotations

import torch

from python_engine.train.progress import Progress
from python_engine.train.tokenizer import MASK_ID


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
                         time_budget_s: float | None = None) -> torch.Tensor:
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
        progress.say(f"generated {min(i + batch, len(prompts))}/{len(prompts)} continuations")
    return torch.cat(out)


def cache_argument_name(model) -> str:
    """transformers renamed forward's `past_key_values` to `cache` during 5.x."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def sample_blocks(seqs: torch.Tensor, prompt_len: int, anchors_per_seq: int, block_size: int,
                  generator: torch.Generator):
    """Anchors [N, A] in [prompt_len, S - B], distinct per sequence and sorted; block tokens
    [N, A, B]; labels [N, A, B-1]."""
    N, S = seqs.shape
    B = block_size
    span = S - B - prompt_len + 1
    A = min(anchors_per_seq, span)
    scores = torch.rand(N, span, generator=generator)
    anchors = scores.topk(A, dim=1).indices.sort(dim=1).values + prompt_len
    anchors = anchors.to(seqs.device)
    offsets = torch.arange(B, device=seqs.device)
    idx = anchors[:, :, None] + offsets  # [N, A, B]
    window = torch.gather(seqs, 1, idx.reshape(N, -1)).view(N, A, B)
    blocks = torch.full_like(window, MASK_ID)
    blocks[:, :, 0] = window[:, :, 0]
    return anchors, blocks, window[:, :, 1:]
