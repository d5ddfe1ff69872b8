"""The DFlash drafter as a trainable torch module, with z-lab's parameter names (fc,
hidden_norm, layers.{i}.self_attn.{q,k,v,o}_proj / q_norm / k_norm, layers.{i}.mlp.*,
layers.{i}.{input,post_attention}_layernorm, norm) so that its state dict is the checkpoint
the reference engine's `load_drafter` reads.

The math is the engine's (python_engine/model/drafter.py), batched for training: many blocks
per sequence, each block [anchor token, mask, ..., mask] at positions a..a+B-1 attending to
the projected target features of positions 0..a-1 and to its own block (non-causal).
tests/demo/test_drafter_equivalence.py checks both forwards agree on the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from python_engine.model.drafter_config import DrafterConfig, drafter_config_dict, drafter_config_from_dict
from python_engine.model.rope import inverse_frequencies
from python_engine.train.recipe import DrafterShape
from python_engine.train.sharded_save import save_sharded
from python_engine.train.tokenizer import MASK_ID

MAX_FILE_BYTES = 7 * 1024 * 1024


def demo_drafter_config(shape: DrafterShape, target_cfg: dict, dtype: str = "bfloat16") -> dict:
    """The demo drafter's config.json, from the recipe's shape and the target's config."""
    return drafter_config_dict(
        hidden_size=target_cfg["hidden_size"], num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads, num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim, intermediate_size=shape.intermediate_size, rope_theta=shape.rope_theta,
        max_position_embeddings=target_cfg["max_position_embeddings"], vocab_size=target_cfg["vocab_size"],
        num_target_layers=target_cfg["num_hidden_layers"], block_size=shape.block_size,
        target_layer_ids=list(shape.target_layer_ids), mask_token_id=MASK_ID, torch_dtype=dtype,
        attention_dropout=0.0,
    )


class RMSNorm(nn.Module):
    """Qwen3RMSNorm: normalise in float32, cast back, scale (as python_engine.model.ops)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        H, hd = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = nn.Linear(H, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(H, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(H, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def kv(self, x, cos, sin):
        """Keys (k_norm, RoPE) and values of x [N, L, H] -> [N, kv_heads, L, hd] each."""
        N, L, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(N, L, self.kv_heads, self.head_dim))
        k = rotate(k, cos, sin)
        v = self.v_proj(x).view(N, L, self.kv_heads, self.head_dim)
        return k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, h, ctx_kv, cos_sin_blk, mask):
        N, L, _ = h.shape
        cos, sin = cos_sin_blk
        q = self.q_norm(self.q_proj(h).view(N, L, self.heads, self.head_dim))
        q = rotate(q, cos, sin).transpose(1, 2)  # [N, heads, L, hd]
        k_blk, v_blk = self.kv(h, cos, sin)
        k = torch.cat([ctx_kv[0], k_blk], dim=2)
        v = torch.cat([ctx_kv[1], v_blk], dim=2)
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)  # head h reads kv head h // groups, as the engine
        v = v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask[:, None])
        return self.o_proj(o.transpose(1, 2).reshape(N, L, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, H: int, I: int):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def rotate(x, cos, sin):
    """Rotate-half RoPE on x [N, L, heads, hd] with cos/sin [N, L, hd]."""
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class DFlashTrainModel(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        H = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        inv_freq, self.attention_factor = inverse_frequencies(cfg.rope, cfg.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @classmethod
    def from_config_dict(cls, raw: dict, seed: int) -> "DFlashTrainModel":
        torch.manual_seed(seed)
        model = cls(drafter_config_from_dict(raw))
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
        return model

    def cos_sin(self, positions: torch.Tensor, dtype):
        """cos, sin [..., hd] as the engine's Rotary.cos_sin (float32 math, one cast)."""
        freqs = positions[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_factor).to(dtype), (emb.sin() * self.attention_factor).to(dtype)

    def forward(self, features, anchors, block_tokens, embed_weight, lm_head_weight):
        """features [N, S, len(ids)*H]: target hidden states at target_layer_ids for the
        sequence's positions 0..S-1; anchors int64 [N, A]: block start positions (>= 1);
        block_tokens int64 [N, A, B]: [token at anchor, mask, ...].
        Returns logits [N, A, B-1, V] for positions anchor+1 .. anchor+B-1."""
        cfg = self.cfg
        N, S, _ = features.shape
        A, B = block_tokens.shape[1], block_tokens.shape[2]
        ctx = self.hidden_norm(self.fc(features))  # [N, S, H]
        ctx_pos = torch.arange(S, device=features.device).expand(N, S)
        blk_pos = (anchors[:, :, None] + torch.arange(B, device=anchors.device)).reshape(N, A * B)
        # float32 tables: the engine casts them to its dtype, which is float32 in the tests
        cos_c, sin_c = self.cos_sin(ctx_pos, torch.float32)
        cos_b, sin_b = self.cos_sin(blk_pos, torch.float32)
        # visibility [N, A*B, S + A*B]: block b sees context positions < its anchor, and itself
        sees_ctx = ctx_pos[:, None, :] < anchors.repeat_interleave(B, dim=1)[:, :, None]
        block_id = torch.arange(A, device=anchors.device).repeat_interleave(B)
        sees_blk = (block_id[:, None] == block_id[None, :]).expand(N, A * B, A * B)
        mask = torch.cat([sees_ctx, sees_blk], dim=2)

        x = F.embedding(block_tokens.reshape(N, A * B), embed_weight) * cfg.input_embedding_scale
        for layer in self.layers:
            ctx_kv = layer.self_attn.kv(ctx, cos_c, sin_c)
            h = layer.input_layernorm(x)
            x = x + layer.self_attn(h, ctx_kv, (cos_b, sin_b), mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        hidden = self.norm(x).view(N, A, B, -1)[:, :, 1:]
        logits = F.linear(hidden, lm_head_weight) * cfg.output_multiplier
        if cfg.final_logit_softcapping:
            cap = cfg.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits


def position_weights(block_size: int, decay: float, device) -> torch.Tensor:
    """DFlash's loss weights over block positions 1..B-1: exp(-(k-1)/decay), mean 1."""
    k = torch.arange(block_size - 1, device=device, dtype=torch.float32)
    w = torch.exp(-k / decay)
    return w / w.mean()


def save_drafter(model: DFlashTrainModel, config: dict, out_dir: Path, dtype=torch.bfloat16) -> Path:
    """config.json + model.safetensors (sharded with an index if over MAX_FILE_BYTES)."""
    out_dir = Path(out_dir)
    tensors = {k: v.detach().to("cpu", dtype) for k, v in model.state_dict().items()}
    save_sharded(tensors, out_dir, MAX_FILE_BYTES)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_dir
