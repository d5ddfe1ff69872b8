"""The target's configuration: one dataclass, read from a Hugging Face config.json and
validated once. Field names and defaults follow transformers' DeepseekV3Config; Kimi's
multimodal release nests the same text config under "text_config".

Anything the engine does not implement (another activation, attention biases, a RoPE type
other than default/yarn, ...) is refused here with a KdtreeError that names the file and
the key, so the forward never meets a surprise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_engine.errors import KdtreeError
from python_engine.json_text import parse_json
from python_engine.model.quant_config import Int4Scheme, int4_scheme_from_config

# transformers' DeepseekV3Config defaults, used when config.json omits a key.
_DEFAULTS: dict[str, Any] = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": None,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "n_group": 8,
    "topk_group": 4,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "norm_topk_prob": True,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_interleave": True,
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
DEFAULT_ROPE_THETA = 10000.0
# transformers builds q_a_layernorm and kv_a_layernorm with DeepseekV3RMSNorm's default eps,
# not config.rms_norm_eps; the oracle wins (both engines use this).
LATENT_NORM_EPS = 1e-6


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters, normalised from `rope_parameters` (transformers 5) or
    the legacy `rope_theta` + `rope_scaling` pair (what DeepSeek and Kimi publish)."""

    rope_type: str = "default"  # "default" | "yarn"
    theta: float = DEFAULT_ROPE_THETA
    factor: float = 1.0
    original_max_position_embeddings: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None  # scales cos/sin (yarn); inferred when None
    truncate: bool = True


@dataclass(frozen=True)
class TargetConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # dense SwiGLU layers
    moe_intermediate_size: int  # each routed / shared expert
    num_hidden_layers: int
    num_attention_heads: int
    n_shared_experts: int
    n_routed_experts: int
    routed_scaling_factor: float
    kv_lora_rank: int
    q_lora_rank: int | None  # None: q_proj straight from the hidden state
    qk_rope_head_dim: int
    v_head_dim: int
    qk_nope_head_dim: int
    n_group: int
    topk_group: int
    num_experts_per_tok: int
    first_k_dense_replace: int
    norm_topk_prob: bool
    max_position_embeddings: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    rope_interleave: bool
    rope: RopeConfig
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    quantization: Int4Scheme | None = None  # INT4 routed experts; None: all weights float
    source: str = "<config>"  # where it was read from, for error messages
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values cached per token per layer: c (kv_lora_rank) then k_pe (qk_rope)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_k_dense_replace

    @property
    def softmax_scale(self) -> float:
        """1/sqrt(qk_head_dim), times mscale(factor, mscale_all_dim)^2 under YaRN (as
        transformers' yarn_apply_mscale)."""
        scale = self.qk_head_dim ** (-0.5)
        if self.rope.rope_type != "default" and self.rope.mscale_all_dim:
            m = yarn_mscale(self.rope.factor, self.rope.mscale_all_dim)
            scale = scale * m * m
        return scale


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(rope: "RopeConfig") -> float:
    """YaRN's cos/sin scale, as transformers derives it when the config does not give it."""
    if rope.attention_factor is not None:
        return float(rope.attention_factor)
    if rope.mscale and rope.mscale_all_dim:
        return float(yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim))
    return yarn_mscale(rope.factor)


def yarn_ramp_bounds(rope: "RopeConfig", dim: int) -> tuple[float, float]:
    """(low, high): the frequency indices between which YaRN blends interpolated and
    extrapolated frequencies (transformers' find_correction_range). Shared by the torch
    reference and the native engine's numpy description so the two cannot drift."""

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(rope.original_max_position_embeddings / (rotations * 2 * math.pi))) / (
            2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: avoid a zero-width ramp
    return low, high


def read_json(path: Path, what: str) -> dict:
    """Read a JSON object, turning every failure into a KdtreeError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KdtreeError(f"{what}: {path} not found") from None
    except UnicodeDecodeError as exc:
        raise KdtreeError(f"{what}: {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise KdtreeError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    obj = parse_json(text, f"{what}: {path}")
    if not isinstance(obj, dict):
        raise KdtreeError(f"{what}: {path} must hold a JSON object")
    return obj


def read_dir_config(folder: str | Path, folder_what: str, what: str) -> tuple[dict, str]:
    """`<folder>/config.json` as a dict, and its path as the source to name in errors; a
    missing folder is a KdtreeError naming it as `folder_what` ("model directory")."""
    folder = Path(folder)
    if not folder.is_dir():
        raise KdtreeError(f"{folder_what} {folder} does not exist")
    path = folder / "config.json"
    return read_json(path, what), str(path)


def shown(v: Any) -> str:
    """A config value for an error message, short whatever its size."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of about {int(v.bit_length() * 0.30103) + 1} digits"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def config_int(where: str, name: str, v: Any, minimum: int = 1) -> int:
    """An integer config value >= minimum (not a bool, not a float), else a KdtreeError
    naming the file and the key."""
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise KdtreeError(f"{where}: {name} must be an integer >= {minimum}, got {shown(v)}")
    return v


def config_number(where: str, name: str, v: Any, *, positive: bool = True) -> float:
    """A finite number config value (an integer or a float, not a bool), > 0 unless
    `positive` is False, else a KdtreeError naming the file and the key. JSON's NaN and
    Infinity, which Python reads, are refused here."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise KdtreeError(f"{where}: {name} must be a number, got {shown(v)}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise KdtreeError(f"{where}: {name} must be a finite number, got {shown(v)}")
    if positive and not f > 0:
        raise KdtreeError(f"{where}: {name} must be > 0, got {shown(v)}")
    return f


def optional_number(where: str, name: str, v: Any, *, positive: bool = True) -> float | None:
    return None if v is None else config_number(where, name, v, positive=positive)


def text_config_of(raw: dict) -> dict:
    """The text model's config: Kimi's multimodal layout nests it under "text_config"."""
    inner = raw.get("text_config")
    return inner if isinstance(inner, dict) else raw


def rope_from_dict(cfg: dict, where: str) -> RopeConfig:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise KdtreeError(f"{where}: rope_parameters / rope_scaling must be an object")
    if any(isinstance(v, dict) for v in params.values()):
        raise KdtreeError(f"{where}: per-layer-type RoPE parameters are not supported")
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", cfg.get("rope_theta", DEFAULT_ROPE_THETA))
    if rope_type not in ("default", "yarn"):
        raise KdtreeError(
            f"{where}: rope type {rope_type!r} is not supported (the engine implements "
            "'default' and 'yarn')"
        )
    if params.get("partial_rotary_factor", 1.0) != 1.0 or cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise KdtreeError(f"{where}: partial_rotary_factor != 1 is not supported")
    theta = config_number(where, "rope_theta", theta)
    if rope_type == "default":
        return RopeConfig(theta=theta)
    max_pos = config_int(where, "max_position_embeddings",
                       cfg.get("max_position_embeddings", _DEFAULTS["max_position_embeddings"]))
    original = config_int(where, "original_max_position_embeddings", cfg.get(
        "original_max_position_embeddings", params.get("original_max_position_embeddings", max_pos)))
    factor = params.get("factor")
    if factor is None:
        factor = max_pos / original

    def opt(name: str, positive: bool = True) -> float | None:
        return optional_number(where, f"rope {name}", params.get(name), positive=positive)

    return RopeConfig(
        rope_type="yarn",
        theta=theta,
        factor=config_number(where, "rope factor", factor),
        original_max_position_embeddings=original,
        beta_fast=config_number(where, "rope beta_fast", params.get("beta_fast") or 32),
        beta_slow=config_number(where, "rope beta_slow", params.get("beta_slow") or 1),
        mscale=opt("mscale", positive=False),
        mscale_all_dim=opt("mscale_all_dim", positive=False),
        attention_factor=opt("attention_factor"),
        truncate=bool(params.get("truncate", True)),
    )


def config_from_dict(raw: dict, source: str = "<config>") -> TargetConfig:
    """Build and validate a TargetConfig from a config.json object (either layout)."""
    cfg = text_config_of(raw)
    where = f"{source}" + (" (text_config)" if cfg is not raw else "")

    def get(name: str):
        return cfg.get(name, _DEFAULTS.get(name))

    def need_int(name: str, minimum: int = 1) -> int:
        return config_int(where, name, get(name), minimum)

    act = get("hidden_act")
    if act not in ("silu", "swish"):
        raise KdtreeError(f"{where}: hidden_act {act!r} is not supported (SwiGLU with silu only)")
    if get("attention_bias"):
        raise KdtreeError(f"{where}: attention_bias = true is not supported")
    # DeepSeek-V3 / Kimi spell out their router; anything else is another model family
    for key, supported in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc"), ("moe_layer_freq", 1)):
        if key in cfg and cfg[key] != supported:
            raise KdtreeError(f"{where}: {key} = {cfg[key]!r} is not supported (only {supported!r})")
    # quantized: INT4 routed experts only (python_engine/model/quant_config.py), else refused
    hidden, moe_inter = need_int("hidden_size"), need_int("moe_intermediate_size")
    quantization = int4_scheme_from_config(raw, cfg, where, in_features=(hidden, moe_inter))

    heads = need_int("num_attention_heads")
    kv_heads = get("num_key_value_heads")
    if kv_heads is not None and kv_heads != heads:
        raise KdtreeError(
            f"{where}: num_key_value_heads ({kv_heads}) must equal num_attention_heads "
            f"({heads}) for MLA"
        )
    q_lora = get("q_lora_rank")
    if q_lora is not None:
        q_lora = need_int("q_lora_rank")
    n_layers = need_int("num_hidden_layers")
    first_dense = need_int("first_k_dense_replace", 0)
    routed = need_int("n_routed_experts", 0)
    n_group = need_int("n_group") if get("n_group") is not None else 1
    topk_group = need_int("topk_group") if get("topk_group") is not None else 1
    top_k = need_int("num_experts_per_tok") if get("num_experts_per_tok") is not None else 1
    if first_dense < n_layers:  # MoE layers exist: their router must be well formed
        if routed < 1:
            raise KdtreeError(f"{where}: MoE layers need n_routed_experts >= 1")
        if routed % n_group:
            raise KdtreeError(f"{where}: n_routed_experts ({routed}) must divide into n_group ({n_group}) groups")
        if routed // n_group < 2:
            raise KdtreeError(f"{where}: each expert group needs >= 2 experts (group score = sum of its top 2)")
        if not 1 <= topk_group <= n_group:
            raise KdtreeError(f"{where}: topk_group ({topk_group}) must be in 1..n_group ({n_group})")
        if not 1 <= top_k <= topk_group * (routed // n_group):
            raise KdtreeError(
                f"{where}: num_experts_per_tok ({top_k}) exceeds the experts in topk_group groups"
            )
    rope_dim = need_int("qk_rope_head_dim")
    if rope_dim % 2:
        raise KdtreeError(f"{where}: qk_rope_head_dim must be even, got {rope_dim}")
    eos = get("eos_token_id")
    eos_list = eos if isinstance(eos, list) else ([] if eos is None else [eos])
    eos_ids = tuple(config_int(where, "eos_token_id", e, 0) for e in eos_list)
    bos = get("bos_token_id")

    return TargetConfig(
        vocab_size=need_int("vocab_size"),
        hidden_size=hidden,
        intermediate_size=need_int("intermediate_size"),
        moe_intermediate_size=moe_inter,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        n_shared_experts=need_int("n_shared_experts", 0),
        n_routed_experts=routed,
        routed_scaling_factor=config_number(where, "routed_scaling_factor", get("routed_scaling_factor")),
        kv_lora_rank=need_int("kv_lora_rank"),
        q_lora_rank=q_lora,
        qk_rope_head_dim=rope_dim,
        v_head_dim=need_int("v_head_dim"),
        qk_nope_head_dim=need_int("qk_nope_head_dim"),
        n_group=int(n_group),
        topk_group=int(topk_group),
        num_experts_per_tok=int(top_k),
        first_k_dense_replace=first_dense,
        norm_topk_prob=bool(get("norm_topk_prob")),
        max_position_embeddings=need_int("max_position_embeddings"),
        rms_norm_eps=config_number(where, "rms_norm_eps", get("rms_norm_eps")),
        tie_word_embeddings=bool(get("tie_word_embeddings")),
        rope_interleave=bool(get("rope_interleave")),
        rope=rope_from_dict(cfg, where),
        bos_token_id=None if bos is None else config_int(where, "bos_token_id", bos, 0),
        eos_token_ids=eos_ids,
        quantization=quantization,
        source=source,
        raw=raw,
    )


def load_target_config(model_dir: str | Path) -> TargetConfig:
    """Read and validate `<model_dir>/config.json`."""
    return config_from_dict(*read_dir_config(model_dir, "model directory", "target config"))
