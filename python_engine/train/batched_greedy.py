"""Greedy continuations of many prompts at once on the reference engine's target
(python_engine.model.target.TargetModel), keeping the drafter's context features on the way:
the self-distillation data of a drafter trained on a CPU (python_engine/train/agree_pair.py).

transformers' DeepseekV3 caches the MLA latents but expands every cached row through
kv_b_proj at every decode step, so its decode cost grows with the square of the length.
This runs the engine's absorbed form (python_engine/model/mla.py) over a batch: one latent
row per token and layer, a few batched matmuls per step. The router, experts and norms are
the engine's own functions; tests/demo/test_agree_pair.py checks the tokens against
ar_generate and the features against TargetModel.forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from python_engine.model.config import LATENT_NORM_EPS
from python_engine.model.mla import MlaWeights
from python_engine.model.moe import moe_forward
from python_engine.model.ops import rms_norm, swiglu
from python_engine.model.target import TargetModel


def _attention(w: MlaWeights, target: TargetModel, h: torch.Tensor, cos_sin, additive: torch.Tensor,
               rows: torch.Tensor, start: int) -> torch.Tensor:
    """MLA of h [N, T, hidden] (input-normed) at positions start.., writing the T new latent
    rows of every sequence into rows [N, capacity, r + rope] and attending over [0, start+T)."""
    cfg = target.cfg
    N, T, _ = h.shape
    nh, nope, r = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.kv_lora_rank
    if w.q_proj is not None:
        q = F.linear(h, w.q_proj)
    else:
        q = F.linear(rms_norm(F.linear(h, w.q_a_proj), w.q_a_norm, LATENT_NORM_EPS), w.q_b_proj)
    q = q.view(N, T, nh, -1)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    kv = F.linear(h, w.kv_a_proj)  # [N, T, r + rope]
    c = rms_norm(kv[..., :r], w.kv_a_norm, LATENT_NORM_EPS)
    cos, sin = cos_sin  # [T, rope]: Rotary.apply wants positions first
    q_pe = target.rotary.apply(q_pe.transpose(0, 1), cos, sin).transpose(0, 1)  # [N, T, nh, rope]
    k_pe = target.rotary.apply(kv[..., r:].transpose(0, 1), cos, sin).transpose(0, 1)  # [N, T, rope]
    rows[:, start : start + T] = torch.cat([c, k_pe], dim=-1)
    c_all, k_pe_all = rows[:, : start + T, :r], rows[:, : start + T, r:]  # [N, S, .]

    # the per-head weights as [nh, N*T, .] batches, the per-sequence rows as [N, nh*T, .]
    # batches: no operand is broadcast (and copied) across the other axis
    q_lat = (q_nope.permute(2, 0, 1, 3).reshape(nh, N * T, nope) @ w.w_kc).view(nh, N, T, r)
    q_lat = q_lat.transpose(0, 1).reshape(N, nh * T, r)
    q_pe = q_pe.transpose(1, 2).reshape(N, nh * T, -1)
    scores = (q_lat @ c_all.transpose(1, 2) + q_pe @ k_pe_all.transpose(1, 2)).view(N, nh, T, -1)
    probs = torch.softmax(scores * cfg.softmax_scale + additive, dim=-1, dtype=torch.float32).to(h.dtype)
    o_lat = (probs.view(N, nh * T, -1) @ c_all).view(N, nh, T, r)
    o = o_lat.permute(1, 0, 2, 3).reshape(nh, N * T, r) @ w.w_vc.transpose(1, 2)  # [nh, N*T, v]
    return F.linear(o.view(nh, N, T, -1).permute(1, 2, 0, 3).reshape(N, T, -1), w.o_proj)


@torch.no_grad()
def _forward(target: TargetModel, tokens: torch.Tensor, start: int, cache: torch.Tensor, layer_ids):
    """(last-position logits [N, V] float32, features [N, T, len(ids) * hidden]) of tokens
    [N, T] at positions start..start+T-1, every sequence over its own cache rows."""
    cfg, w = target.cfg, target.w
    N, T = tokens.shape
    positions = torch.arange(start, start + T, device=target.device)
    cos_sin = target.rotary.cos_sin(positions, target.dtype)
    cols = torch.arange(start + T, device=target.device)
    additive = torch.zeros(T, start + T, dtype=torch.float32, device=target.device)
    additive.masked_fill_(cols[None, :] > positions[:, None], float("-inf"))  # causal
    x = F.embedding(tokens, w.embed)
    kept = {}
    for i, lw in enumerate(w.layers):
        x = x + _attention(lw.attn, target, rms_norm(x, lw.input_norm, cfg.rms_norm_eps), cos_sin, additive,
                           cache[i], start)
        hn = rms_norm(x, lw.post_attention_norm, cfg.rms_norm_eps)
        if lw.moe is not None:  # the router and experts work token by token
            x = x + moe_forward(lw.moe, cfg, hn.reshape(N * T, -1)).view(N, T, -1)
        else:
            x = x + swiglu(hn, *lw.mlp)
        if i in layer_ids:
            kept[i] = x
    logits = target.logits(rms_norm(x[:, -1], w.norm, cfg.rms_norm_eps))
    features = torch.cat([kept[i] for i in layer_ids], dim=-1) if layer_ids else x[..., :0]
    return logits, features


@torch.no_grad()
def greedy_with_features(target: TargetModel, prompts: torch.Tensor, new_tokens: int,
                         layer_ids=()) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts int64 [N, P] (one length for the batch) -> (sequences [N, P + new_tokens]:
    the prompts continued greedily, never stopping at EOS, lowest id on ties as
    ar_generate; features [N, P + new_tokens - 1, len(layer_ids) * hidden]: the residual
    stream after layer_ids at every position but the last, which no forward has run)."""
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be >= 1, got {new_tokens}")
    layer_ids = tuple(int(i) for i in layer_ids)
    prompts = prompts.to(target.device)
    N, P = prompts.shape
    cfg = target.cfg
    cache = torch.zeros(cfg.num_hidden_layers, N, P + new_tokens, cfg.latent_dim, dtype=target.dtype,
                        device=target.device)
    logits, feats = _forward(target, prompts, 0, cache, layer_ids)
    seqs, features = [prompts], [feats]
    for step in range(new_tokens):
        token = logits.argmax(dim=-1, keepdim=True)  # [N, 1]
        seqs.append(token)
        if step + 1 == new_tokens:
            break
        logits, feats = _forward(target, token, P + step, cache, layer_ids)
        features.append(feats)
    return torch.cat(seqs, dim=1), torch.cat(features, dim=1)
