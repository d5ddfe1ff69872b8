"""The DFlash drafter's configuration (z-lab format): a Qwen3-style config.json plus
`block_size` and `dflash_config.{target_layer_ids, mask_token_id}` (top-level copies of
those keys are accepted too, as z-lab's loader does)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.model.config import (
    RopeConfig,
    TargetConfig,
    config_int,
    config_number,
    optional_number,
    read_dir_config,
    rope_from_dict,
)


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    num_target_layers: int | None = None  # the depth of the target it was trained on, when given
    source: str = "<drafter config>"


def drafter_config_from_dict(raw: dict, source: str = "<drafter config>") -> DrafterConfig:
    dflash = raw.get("dflash_config") or {}
    if not isinstance(dflash, dict):
        raise KdtreeError(f"{source}: dflash_config must be an object")

    def value(name, default=None):
        return dflash.get(name, raw.get(name, default))

    def need_int(name, v, minimum=1) -> int:
        return config_int(source, name, v, minimum)

    if raw.get("hidden_act", "silu") not in ("silu", "swish"):
        raise KdtreeError(f"{source}: hidden_act {raw.get('hidden_act')!r} is not supported")
    if raw.get("attention_bias"):
        raise KdtreeError(f"{source}: attention_bias = true is not supported")
    layer_types = raw.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types) or raw.get("use_sliding_window"):
        raise KdtreeError(f"{source}: sliding-window drafter layers are not supported")
    if value("is_causal"):
        raise KdtreeError(f"{source}: causal drafter attention is not supported (DFlash is non-causal)")
    for key in ("conv_kernel_size", "selector_rank"):
        if value(key) is not None:
            raise KdtreeError(f"{source}: DFlash2 drafters ({key}) are not supported")
    ids = value("target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise KdtreeError(f"{source}: dflash_config.target_layer_ids must be a non-empty list of integers")
    mask = value("mask_token_id")
    heads = need_int("num_attention_heads", raw.get("num_attention_heads"))
    hidden = need_int("hidden_size", raw.get("hidden_size"))
    kv_heads = need_int("num_key_value_heads", raw.get("num_key_value_heads", heads))
    if heads % kv_heads:
        raise KdtreeError(
            f"{source}: num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    softcap = value("final_logit_softcapping")
    return DrafterConfig(
        hidden_size=hidden,
        num_hidden_layers=need_int("num_hidden_layers", raw.get("num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=need_int("head_dim", raw.get("head_dim", hidden // heads)),
        intermediate_size=need_int("intermediate_size", raw.get("intermediate_size")),
        rms_norm_eps=config_number(source, "rms_norm_eps", raw.get("rms_norm_eps", 1e-6)),
        rope=rope_from_dict(raw, source),
        block_size=need_int("block_size", value("block_size", 16)),
        target_layer_ids=tuple(ids),
        mask_token_id=need_int("mask_token_id", mask, 0),
        input_embedding_scale=config_number(source, "input_embedding_scale", value("input_embedding_scale", 1.0)),
        output_multiplier=config_number(source, "output_multiplier", value("output_multiplier", 1.0)),
        final_logit_softcapping=optional_number(source, "final_logit_softcapping", softcap or None),
        num_target_layers=(None if value("num_target_layers") is None
                           else need_int("num_target_layers", value("num_target_layers"))),
        source=source,
    )


def drafter_config_dict(*, hidden_size: int, num_hidden_layers: int, num_attention_heads: int,
                        num_key_value_heads: int, head_dim: int, intermediate_size: int,
                        rope_theta: float, max_position_embeddings: int, vocab_size: int,
                        num_target_layers: int, block_size: int, target_layer_ids: list[int],
                        mask_token_id: int, torch_dtype: str,
                        attention_dropout: float | None = None) -> dict:
    """z-lab's DFlash config.json (a Qwen3 config plus block_size and dflash_config), the
    one writer of it: the demo drafter's export and the random test drafters both use it.
    `attention_dropout` is written only when given (the committed reference bundles embed
    configs without it)."""
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": max_position_embeddings,
        "vocab_size": vocab_size,
        "attention_bias": False,
    }
    if attention_dropout is not None:
        cfg["attention_dropout"] = attention_dropout
    cfg.update({
        "tie_word_embeddings": False,
        "num_target_layers": num_target_layers,
        "block_size": block_size,
        "dflash_config": {"target_layer_ids": list(target_layer_ids), "mask_token_id": mask_token_id},
        "torch_dtype": torch_dtype,
    })
    return cfg


def check_against_target(d: DrafterConfig, t: TargetConfig) -> None:
    """The drafter reads the target's embeddings, lm_head and hidden states: shapes must agree."""
    if d.hidden_size != t.hidden_size:
        raise KdtreeError(f"{d.source}: hidden_size {d.hidden_size} != the target's {t.hidden_size}")
    if d.num_target_layers is not None and d.num_target_layers != t.num_hidden_layers:
        raise KdtreeError(
            f"{d.source}: num_target_layers {d.num_target_layers} says it was built for a target of that many "
            f"layers; this target has {t.num_hidden_layers}"
        )
    bad = [i for i in d.target_layer_ids if not 0 <= i < t.num_hidden_layers]
    if bad:
        raise KdtreeError(
            f"{d.source}: target_layer_ids {bad} are outside the target's layers 0..{t.num_hidden_layers - 1}"
        )
    if not 0 <= d.mask_token_id < t.vocab_size:
        raise KdtreeError(f"{d.source}: mask_token_id {d.mask_token_id} is outside the target's vocab ({t.vocab_size})")


def load_drafter_config(drafter_dir: str | Path) -> DrafterConfig:
    return drafter_config_from_dict(*read_dir_config(drafter_dir, "drafter directory", "drafter config"))
