"""The target model (DeepSeek-V3 / Kimi K2 text model) over a latent cache.

One forward takes new tokens [T] with their positions [T], a visibility mask of the new
tokens over cache + new rows (None = causal), and the request's LatentCache; it appends the
new tokens' latents to the cache and returns logits [T, V] and the residual-stream hidden
states after the requested decoder layers (the drafter's context features).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from python_engine.errors import KdtreeError
from python_engine.model.config import TargetConfig
from python_engine.model.latent_cache import LatentCache
from python_engine.model.mla import MlaWeights, mla_forward
from python_engine.model.moe import MoeWeights, moe_forward
from python_engine.model.ops import rms_norm, swiglu
from python_engine.model.rope import Rotary


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    attn: MlaWeights
    mlp: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # dense: gate, up, down
    moe: MoeWeights | None


@dataclass
class TargetWeights:
    embed: torch.Tensor  # [V, hidden]
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor  # [V, hidden]


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [T, V], float32
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [T, hidden]

    def features(self, layer_ids) -> torch.Tensor:
        """Concatenated hidden states of `layer_ids`, in that order: [T, len * hidden]."""
        return torch.cat([self.hidden[i] for i in layer_ids], dim=-1)


def causal_visibility(past: int, T: int, device) -> torch.Tensor:
    """bool [T, past+T]: new token i sees the whole cache and new tokens 0..i."""
    cols = torch.arange(past + T, device=device)
    return cols[None, :] <= (past + torch.arange(T, device=device))[:, None]


class TargetModel:
    def __init__(self, cfg: TargetConfig, weights: TargetWeights, name: str = "target"):
        self.cfg = cfg
        self.w = weights
        self.name = name
        self.device = weights.embed.device
        self.dtype = weights.embed.dtype
        self.rotary = Rotary(cfg.rope, cfg.qk_rope_head_dim, cfg.rope_interleave, self.device, self.dtype)
        # called as routing_observer(layer id, experts int64 [T, k]) after each MoE layer's
        # router in every forward: the experts each row chose (kdtree bench routing)
        self.routing_observer: Callable[[int, torch.Tensor], None] | None = None

    def new_cache(self, capacity: int = 256) -> LatentCache:
        return LatentCache(self.cfg.num_hidden_layers, self.cfg.latent_dim, self.dtype, self.device, capacity)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.w.embed)

    def logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(normed_hidden, self.w.lm_head).float()

    @torch.no_grad()
    def forward(
        self,
        tokens,
        positions,
        cache: LatentCache,
        visibility: torch.Tensor | None = None,
        hidden_layers=(),
        taps: dict | None = None,
        route_override: dict[int, dict[int, list[int]]] | None = None,
    ) -> TargetOutput:
        """Run T new tokens through the model, appending their latents to `cache`.

        tokens, positions: int [T]. visibility: bool [T, cache.length + T] (True = may
        attend), e.g. a tree verify's ancestor mask; None means causal.
        hidden_layers: decoder layer ids whose output to return (see the module docstring).
        taps: if a dict, filled with per-layer intermediates for the reference bundles:
        "{i}.attn_out", "{i}.ffn_in", "{i}.ffn_out", "{i}.router_experts/weights" (MoE).
        route_override: layer id -> {row of this forward: the experts it takes instead of its
        router's choice}: a test hook (tests/doubles/router_ties.py).
        """
        cfg = self.cfg
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device).reshape(-1)
        positions = torch.as_tensor(positions, dtype=torch.long, device=self.device).reshape(-1)
        T, past = tokens.numel(), cache.length
        if positions.numel() != T:
            raise KdtreeError(f"forward: {T} tokens but {positions.numel()} positions")
        if T == 0:
            raise KdtreeError("forward: no tokens")
        if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size:
            raise KdtreeError(f"forward: token ids must be in 0..{cfg.vocab_size - 1}")
        if visibility is None:
            visibility = causal_visibility(past, T, self.device)
        visibility = torch.as_tensor(visibility, dtype=torch.bool, device=self.device)
        if tuple(visibility.shape) != (T, past + T):
            raise KdtreeError(f"forward: visibility must be [{T}, {past + T}], got {list(visibility.shape)}")
        wanted = set(int(i) for i in hidden_layers)
        if any(not 0 <= i < cfg.num_hidden_layers for i in wanted):
            raise KdtreeError(f"forward: hidden layer ids must be in 0..{cfg.num_hidden_layers - 1}")

        additive = torch.zeros(T, past + T, dtype=torch.float32, device=self.device)
        additive.masked_fill_(~visibility, float("-inf"))
        cos_sin = self.rotary.cos_sin(positions, self.dtype)
        x = self.embed(tokens)
        out = TargetOutput(logits=torch.empty(0))
        for i, lw in enumerate(self.w.layers):
            a = mla_forward(lw.attn, cfg, self.rotary, rms_norm(x, lw.input_norm, cfg.rms_norm_eps),
                            cos_sin, additive, cache, i)
            x = x + a
            hn = rms_norm(x, lw.post_attention_norm, cfg.rms_norm_eps)
            layer_taps = {} if taps is not None or self.routing_observer else None
            if lw.moe is not None:
                f = moe_forward(lw.moe, cfg, hn, layer_taps, (route_override or {}).get(i))
                if self.routing_observer:
                    self.routing_observer(i, layer_taps["router_experts"])
            else:
                f = swiglu(hn, *lw.mlp)
            x = x + f
            if taps is not None:
                layer_taps.update(attn_out=a, ffn_in=hn, ffn_out=f)
                taps.update({f"{i}.{k}": v for k, v in layer_taps.items()})
            if i in wanted:
                out.hidden[i] = x
        cache.advance(T)
        out.logits = self.logits(rms_norm(x, self.w.norm, cfg.rms_norm_eps))
        return out
