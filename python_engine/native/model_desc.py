"""The models as the native engine's C API takes them: the validated configs
(python_engine/model/config.py, drafter_config.py) flattened into kd_target_config /
kd_drafter_config, with the RoPE inverse frequencies computed here in numpy float32 exactly
as python_engine/model/rope.py computes them in torch (no torch needed)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from python_engine.errors import KdtreeError
from python_engine.model.config import LATENT_NORM_EPS, RopeConfig, TargetConfig, yarn_attention_factor, yarn_ramp_bounds
from python_engine.model.drafter_config import DrafterConfig
from python_engine.native.library import MAX_TARGET_LAYER_IDS, DrafterConfigC, TargetConfigC

F32 = np.float32


def inverse_frequencies(rope: RopeConfig, dim: int) -> tuple[np.ndarray, float]:
    """(inv_freq float32 [dim/2], attention_factor), python_engine/model/rope.py's float32 path."""
    base = F32(rope.theta)
    exponents = np.arange(0, dim, 2, dtype=F32) / F32(dim)
    if rope.rope_type == "default":
        return (F32(1.0) / np.power(base, exponents)).astype(F32), 1.0
    factor = rope.factor
    attention_factor = yarn_attention_factor(rope)
    low, high = yarn_ramp_bounds(rope, dim)
    ramp = np.clip((np.arange(dim // 2, dtype=F32) - F32(low)) / F32(high - low), 0, 1).astype(F32)
    extrapolation_weight = F32(1) - ramp
    pos_freqs = np.power(base, exponents).astype(F32)
    extrapolation = F32(1.0) / pos_freqs
    interpolation = F32(1.0) / (F32(factor) * pos_freqs)
    inv_freq = interpolation * (F32(1) - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq.astype(F32), float(attention_factor)


@dataclass
class ModelDescription:
    """The C structs and the arrays they point into (kept alive with them)."""

    target: TargetConfigC
    drafter: DrafterConfigC | None
    arrays: list[np.ndarray]


def describe(target: TargetConfig, drafter: DrafterConfig | None) -> ModelDescription:
    arrays: list[np.ndarray] = []

    def c_floats(a: np.ndarray):
        a = np.ascontiguousarray(a, dtype=F32)
        arrays.append(a)
        return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    t = target
    inv, attn = inverse_frequencies(t.rope, t.qk_rope_head_dim)
    tc = TargetConfigC(
        vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        moe_intermediate_size=t.moe_intermediate_size, num_layers=t.num_hidden_layers,
        num_heads=t.num_attention_heads, q_lora_rank=t.q_lora_rank or 0, kv_lora_rank=t.kv_lora_rank,
        qk_nope_dim=t.qk_nope_head_dim, qk_rope_dim=t.qk_rope_head_dim, v_head_dim=t.v_head_dim,
        n_routed_experts=t.n_routed_experts, n_shared_experts=t.n_shared_experts,
        experts_per_token=t.num_experts_per_tok, n_group=t.n_group, topk_group=t.topk_group,
        first_dense_layers=t.first_k_dense_replace, norm_topk_prob=int(t.norm_topk_prob),
        rope_interleave=int(t.rope_interleave), tie_word_embeddings=int(t.tie_word_embeddings),
        experts_int4=int(t.quantization is not None),
        routed_scaling_factor=t.routed_scaling_factor, rms_norm_eps=t.rms_norm_eps,
        latent_norm_eps=LATENT_NORM_EPS, softmax_scale=t.softmax_scale, rope_attention_factor=attn,
        rope_inv_freq=c_floats(inv),
    )
    dc = None
    if drafter is not None:
        d = drafter
        if len(d.target_layer_ids) > MAX_TARGET_LAYER_IDS:
            raise KdtreeError(f"{d.source}: more than {MAX_TARGET_LAYER_IDS} target_layer_ids")
        dinv, dattn = inverse_frequencies(d.rope, d.head_dim)
        ids = (ctypes.c_int32 * MAX_TARGET_LAYER_IDS)(*d.target_layer_ids)
        dc = DrafterConfigC(
            hidden_size=d.hidden_size, num_layers=d.num_hidden_layers, num_heads=d.num_attention_heads,
            num_kv_heads=d.num_key_value_heads, head_dim=d.head_dim, intermediate_size=d.intermediate_size,
            block_size=d.block_size, mask_token_id=d.mask_token_id, n_target_layers=len(d.target_layer_ids),
            target_layer_ids=ids, rms_norm_eps=d.rms_norm_eps, input_embedding_scale=d.input_embedding_scale,
            output_multiplier=d.output_multiplier, final_logit_softcapping=d.final_logit_softcapping or 0.0,
            rope_attention_factor=dattn, rope_inv_freq=c_floats(dinv),
        )
    return ModelDescription(tc, dc, arrays)
