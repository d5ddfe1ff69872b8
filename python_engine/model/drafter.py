"""The DFlash drafter (block diffusion, one forward per round).

Inputs: the block [bonus, mask, ..., mask] embedded with the target's embed_tokens (times
input_embedding_scale), and context features: the target's hidden states at
target_layer_ids, concatenated, projected by `fc` and normalised by `hidden_norm`.
Each Qwen3-style layer's attention draws queries from the block only and keys/values from
the context (k_proj/v_proj of the projected features, no layer norm) and from the block
(k_proj/v_proj of the layer-normed block), with q_norm/k_norm per head, rotate-half RoPE at
the tokens' positions, and no mask (non-causal within the block). The last norm's output
at block positions 1.. goes through the target's lm_head.

Context K/V depend only on the features and positions, so they are cached per request and
extended each round with the newly committed tokens (the block's own K/V are dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from python_engine.model.checkpoint import Checkpoint
from python_engine.model.drafter_config import DrafterConfig, check_against_target, load_drafter_config
from python_engine.model.ops import rms_norm, swiglu
from python_engine.model.rope import Rotary
from python_engine.model.target import TargetModel


@dataclass
class DrafterLayer:
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    q_proj: torch.Tensor  # [heads*hd, hidden]
    k_proj: torch.Tensor  # [kv_heads*hd, hidden]
    v_proj: torch.Tensor
    o_proj: torch.Tensor  # [hidden, heads*hd]
    q_norm: torch.Tensor  # [hd]
    k_norm: torch.Tensor
    mlp: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # gate, up, down


@dataclass
class DrafterWeights:
    fc: torch.Tensor  # [hidden, len(target_layer_ids)*hidden]
    hidden_norm: torch.Tensor
    layers: list[DrafterLayer]
    norm: torch.Tensor


@dataclass
class DrafterState:
    """Per request: each layer's context K/V [c, kv_heads, hd] after k_norm and RoPE."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0


def drafter_weight_shapes(cfg: DrafterConfig) -> dict[str, tuple[int, ...]]:
    """Tensor names of a z-lab DFlash checkpoint and their shapes."""
    H, hd = cfg.hidden_size, cfg.head_dim
    q, kv, I = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
    shapes = {"fc.weight": (H, len(cfg.target_layer_ids) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
            p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
        })
    return shapes


class DFlashDrafter:
    def __init__(self, cfg: DrafterConfig, weights: DrafterWeights, target: TargetModel, name: str = "dflash"):
        check_against_target(cfg, target.cfg)
        self.cfg = cfg
        self.w = weights
        self.target = target
        self.name = name
        self.block_size = cfg.block_size
        self.target_layer_ids = cfg.target_layer_ids
        self.rotary = Rotary(cfg.rope, cfg.head_dim, interleave=False, device=target.device, model_dtype=target.dtype)

    def new_state(self) -> DrafterState:
        n = self.cfg.num_hidden_layers
        return DrafterState(keys=[None] * n, values=[None] * n)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(x.shape[0], n, self.cfg.head_dim)

    def _kv(self, lw: DrafterLayer, x: torch.Tensor, cos_sin) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        k = rms_norm(self._heads(F.linear(x, lw.k_proj), cfg.num_key_value_heads), lw.k_norm, cfg.rms_norm_eps)
        k = self.rotary.apply(k, *cos_sin)
        return k, self._heads(F.linear(x, lw.v_proj), cfg.num_key_value_heads)

    @torch.no_grad()
    def extend_context(self, state: DrafterState, features: torch.Tensor, start: int) -> None:
        """Append context tokens at positions start-c .. start-1 to the drafter's K/V."""
        c = features.shape[0]
        if c == 0:
            return
        if state.length != start - c:
            raise ValueError(f"drafter context holds {state.length} tokens, new context starts at {start - c}")
        dtype = self.target.dtype
        ctx = rms_norm(F.linear(features.to(dtype), self.w.fc), self.w.hidden_norm, self.cfg.rms_norm_eps)
        positions = torch.arange(start - c, start, device=ctx.device)
        cos_sin = self.rotary.cos_sin(positions, dtype)
        for i, lw in enumerate(self.w.layers):
            k, v = self._kv(lw, ctx, cos_sin)
            if state.keys[i] is not None:
                k, v = torch.cat([state.keys[i], k]), torch.cat([state.values[i], v])
            state.keys[i], state.values[i] = k, v
        state.length = start

    @torch.no_grad()
    def draft(self, state, ctx_tokens, ctx_features, bonus: int, start: int, block_size: int) -> torch.Tensor:
        cfg = self.cfg
        self.extend_context(state, ctx_features, start)
        device, dtype = self.target.device, self.target.dtype
        block = torch.full((block_size,), cfg.mask_token_id, dtype=torch.long, device=device)
        block[0] = bonus
        x = self.target.embed(block) * cfg.input_embedding_scale
        cos_sin = self.rotary.cos_sin(torch.arange(start, start + block_size, device=device), dtype)
        groups = cfg.num_attention_heads // cfg.num_key_value_heads
        for i, lw in enumerate(self.w.layers):
            h = rms_norm(x, lw.input_norm, cfg.rms_norm_eps)
            q = rms_norm(self._heads(F.linear(h, lw.q_proj), cfg.num_attention_heads), lw.q_norm, cfg.rms_norm_eps)
            q = self.rotary.apply(q, *cos_sin)
            k_blk, v_blk = self._kv(lw, h, cos_sin)
            k = k_blk if state.keys[i] is None else torch.cat([state.keys[i], k_blk])
            v = v_blk if state.values[i] is None else torch.cat([state.values[i], v_blk])
            k = k.repeat_interleave(groups, dim=1)  # [S, heads, hd]
            v = v.repeat_interleave(groups, dim=1)
            scores = torch.einsum("thd,shd->hts", q, k) * cfg.head_dim ** -0.5
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
            o = torch.einsum("hts,shd->thd", probs, v).reshape(block_size, -1)
            x = x + F.linear(o, lw.o_proj)
            x = x + swiglu(rms_norm(x, lw.post_attention_norm, cfg.rms_norm_eps), *lw.mlp)
        hidden = rms_norm(x, self.w.norm, cfg.rms_norm_eps)[1:]
        logits = self.target.logits(hidden) * cfg.output_multiplier
        if cfg.final_logit_softcapping:
            cap = cfg.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits


def load_drafter(drafter_dir: str | Path, target: TargetModel) -> DFlashDrafter:
    """Read a z-lab DFlash checkpoint directory for `target` (same device and dtype)."""
    drafter_dir = Path(drafter_dir)
    cfg = load_drafter_config(drafter_dir)
    check_against_target(cfg, target.cfg)
    ckpt = Checkpoint(drafter_dir)
    shapes = drafter_weight_shapes(cfg)
    if "fc.weight" not in ckpt and "model.fc.weight" in ckpt.weight_map:
        ckpt.prefix = "model."

    def get(name: str) -> torch.Tensor:
        return ckpt.get(name, shapes[name]).to(device=target.device, dtype=target.dtype)

    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        a = p + "self_attn."
        layers.append(DrafterLayer(
            input_norm=get(p + "input_layernorm.weight"),
            post_attention_norm=get(p + "post_attention_layernorm.weight"),
            q_proj=get(a + "q_proj.weight"), k_proj=get(a + "k_proj.weight"),
            v_proj=get(a + "v_proj.weight"), o_proj=get(a + "o_proj.weight"),
            q_norm=get(a + "q_norm.weight"), k_norm=get(a + "k_norm.weight"),
            mlp=(get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight"), get(p + "mlp.down_proj.weight")),
        ))
    weights = DrafterWeights(fc=get("fc.weight"), hidden_norm=get("hidden_norm.weight"), layers=layers,
                             norm=get("norm.weight"))
    return DFlashDrafter(cfg, weights, target, name=drafter_dir.name)
