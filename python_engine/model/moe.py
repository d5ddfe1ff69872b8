"""The DeepSeek-V3 mixture of experts: sigmoid router with correction bias and
group-limited top-k, routed SwiGLU experts, shared experts.

The router runs in float32 whatever the model dtype (transformers keeps gate.weight and
e_score_correction_bias in float32); expert outputs are weighted in float32 then cast back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from python_engine.model.config import TargetConfig
from python_engine.model.ops import swiglu


@dataclass
class MoeWeights:
    router: torch.Tensor  # float32 [E, hidden]
    correction_bias: torch.Tensor  # float32 [E]
    gate: torch.Tensor  # [E, I, hidden]
    up: torch.Tensor  # [E, I, hidden]
    down: torch.Tensor  # [E, hidden, I]
    shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # gate, up, down


def route(router: torch.Tensor, bias: torch.Tensor, cfg: TargetConfig, h: torch.Tensor,
          override: dict[int, list[int]] | None = None):
    """(weights [T, k] in the router's dtype, experts int64 [T, k]) for h [T, hidden].

    Experts are chosen by sigmoid score + correction bias, within the best `topk_group`
    groups (a group's score is the sum of its top two); the weights are the plain sigmoid
    scores of the chosen experts, normalised if norm_topk_prob, times routed_scaling_factor.
    override: row -> the k experts that row takes instead of its own choice (a test hook:
    replaying the other side of a router near-tie, tests/doubles/router_ties.py).
    """
    T = h.shape[0]
    E, G = cfg.n_routed_experts, cfg.n_group
    scores = F.linear(h.to(router.dtype), router).sigmoid()
    choice = scores + bias
    group_scores = choice.view(T, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=cfg.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E).bool()
    choice = choice.masked_fill(~expert_mask, float("-inf"))
    experts = torch.topk(choice, k=cfg.num_experts_per_tok, dim=-1, sorted=False)[1]
    for row, chosen in (override or {}).items():
        experts[row] = torch.as_tensor(chosen, dtype=experts.dtype, device=experts.device)
    weights = scores.gather(1, experts)
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * cfg.routed_scaling_factor, experts


# Below this many gathered weight values (T * k * 3 * I * hidden) the experts run as one
# batched matmul over gathered weights (few ops: decode steps, small verifies); above it,
# one pass per expert hit (bounded memory: prefill of a real-size model).
GATHER_LIMIT = 1 << 22


def takes_gathered_path(rows: int, k: int, intermediate: int, hidden: int) -> bool:
    """Whether a forward of `rows` tokens runs its experts as one batched matmul over gathered
    weights (else one pass per expert hit)."""
    return rows * k * 3 * intermediate * hidden <= GATHER_LIMIT


def moe_forward(w: MoeWeights, cfg: TargetConfig, h: torch.Tensor, taps: dict | None = None,
                override: dict[int, list[int]] | None = None) -> torch.Tensor:
    weights, experts = route(w.router, w.correction_bias, cfg, h, override)
    if taps is not None:
        taps["router_weights"], taps["router_experts"] = weights, experts
    T, k = experts.shape
    if takes_gathered_path(T, k, w.gate.shape[1], w.gate.shape[2]):
        x = h[:, None, :, None]  # [T, 1, hidden, 1]
        act = F.silu((w.gate[experts] @ x)[..., 0]) * (w.up[experts] @ x)[..., 0]  # [T, k, I]
        y = (w.down[experts] @ act[..., None])[..., 0]  # [T, k, hidden]
        out = (y * weights[..., None]).sum(dim=1).to(h.dtype)
    else:
        out = torch.zeros_like(h)
        for e in torch.unique(experts).tolist():  # ascending, as transformers' loop
            token, slot = torch.where(experts == e)
            y = swiglu(h[token], w.gate[e], w.up[e], w.down[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
    if w.shared is not None:
        out = out + swiglu(h, *w.shared)
    return out
