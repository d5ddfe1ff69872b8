"""Multi-head latent attention in the absorbed form.

Per token the layer caches only c = kv_a_layernorm(kv_a(h)[:r]) and k_pe = rope(kv_a(h)[r:]).
kv_b_proj's weight splits per head into w_kc [H, nope, r] and w_vc [H, v, r]; then
    q_lat = q_nope @ w_kc                       (per head, length r)
    score = (q_lat . c_j + q_pe . k_pe_j) * softmax_scale
    o     = (softmax(score) @ c) @ w_vc^T ;  out = o_proj(concat heads)
which equals transformers' expanded form (k_nope = w_kc c, v = w_vc c) up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from python_engine.model.config import LATENT_NORM_EPS, TargetConfig
from python_engine.model.latent_cache import LatentCache
from python_engine.model.ops import rms_norm
from python_engine.model.rope import Rotary


@dataclass
class MlaWeights:
    q_proj: torch.Tensor | None  # [H*qk, hidden] when q_lora_rank is None
    q_a_proj: torch.Tensor | None  # [q_lora, hidden]
    q_a_norm: torch.Tensor | None  # [q_lora]
    q_b_proj: torch.Tensor | None  # [H*qk, q_lora]
    kv_a_proj: torch.Tensor  # [r + rope, hidden]
    kv_a_norm: torch.Tensor  # [r]
    w_kc: torch.Tensor  # [H, nope, r]
    w_vc: torch.Tensor  # [H, v, r]
    o_proj: torch.Tensor  # [hidden, H*v]


def split_kv_b(kv_b: torch.Tensor, cfg: TargetConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_b_proj.weight [H*(nope+v), r] -> (w_kc [H, nope, r], w_vc [H, v, r])."""
    per_head = kv_b.view(cfg.num_attention_heads, cfg.qk_nope_head_dim + cfg.v_head_dim, cfg.kv_lora_rank)
    return per_head[:, : cfg.qk_nope_head_dim].contiguous(), per_head[:, cfg.qk_nope_head_dim :].contiguous()


def mla_forward(
    w: MlaWeights,
    cfg: TargetConfig,
    rotary: Rotary,
    h: torch.Tensor,  # [T, hidden], already input_layernorm'ed
    cos_sin: tuple[torch.Tensor, torch.Tensor],  # [T, rope] each
    additive_mask: torch.Tensor,  # float32 [T, past+T]: 0 visible, -inf hidden
    cache: LatentCache,
    layer: int,
) -> torch.Tensor:
    T = h.shape[0]
    nh, nope, rope_d, r = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank
    if w.q_proj is not None:
        q = F.linear(h, w.q_proj)
    else:
        q = F.linear(rms_norm(F.linear(h, w.q_a_proj), w.q_a_norm, LATENT_NORM_EPS), w.q_b_proj)
    q = q.view(T, nh, nope + rope_d)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    kv = F.linear(h, w.kv_a_proj)  # [T, r + rope]
    c = rms_norm(kv[:, :r], w.kv_a_norm, LATENT_NORM_EPS)
    cos, sin = cos_sin
    q_pe = rotary.apply(q_pe, cos, sin)  # [T, nh, rope]
    k_pe = rotary.apply(kv[:, r:], cos, sin)  # [T, rope]

    rows = cache.write(layer, cache.length, torch.cat([c, k_pe], dim=-1))  # [S, r + rope]
    c_all, k_pe_all = rows[:, :r], rows[:, r:]

    # head-major batched matmuls: [nh, T, .] against the shared latent rows [S, .]
    q_lat = torch.matmul(q_nope.transpose(0, 1), w.w_kc)  # [nh, T, r]
    scores = torch.matmul(q_lat, c_all.T) + torch.matmul(q_pe.transpose(0, 1), k_pe_all.T)  # [nh, T, S]
    scores = scores * cfg.softmax_scale + additive_mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(h.dtype)
    o_lat = torch.matmul(probs, c_all)  # [nh, T, r]
    o = torch.matmul(o_lat, w.w_vc.transpose(1, 2))  # [nh, T, v]
    return F.linear(o.transpose(0, 1).reshape(T, nh * cfg.v_head_dim), w.o_proj)
