"""Loading the target from a Hugging Face directory into TargetWeights: DeepSeek-V3 tensor
names, or Kimi's multimodal layout (the same names under "language_model.")."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from python_engine.errors import KdtreeError
from python_engine.model.checkpoint import Checkpoint
from python_engine.model.config import load_target_config
from python_engine.model.int4 import read_int4_linear
from python_engine.model.mla import MlaWeights, split_kv_b
from python_engine.model.moe import MoeWeights
from python_engine.model.target import LayerWeights, TargetModel, TargetWeights

KIMI_PREFIX = "language_model."
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise KdtreeError(f"dtype {name!r} is not supported; use one of {', '.join(DTYPES)}") from None


def detect_prefix(ckpt: Checkpoint) -> str:
    if "model.embed_tokens.weight" in ckpt.weight_map:
        return ""
    if KIMI_PREFIX + "model.embed_tokens.weight" in ckpt.weight_map:
        return KIMI_PREFIX
    raise KdtreeError(
        f"checkpoint {ckpt.directory}: no 'model.embed_tokens.weight' (nor Kimi's "
        f"'{KIMI_PREFIX}model.embed_tokens.weight'); is this a DeepSeek-V3 / Kimi checkpoint?"
    )


def load_target(
    model_dir: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: Callable[[int, int], None] | None = None,
) -> TargetModel:
    """Read config.json and the safetensors weights; `progress(done, total)` per layer."""
    model_dir = Path(model_dir)
    cfg = load_target_config(model_dir)
    ckpt = Checkpoint(model_dir)
    ckpt.prefix = detect_prefix(ckpt)
    device = torch.device(device)

    # the router stays in float32 whatever the model dtype (as transformers), float64 in a
    # float64 model (the reference bundles)
    router_dtype = torch.float64 if dtype == torch.float64 else torch.float32

    def get(name: str, shape, keep_fp32: bool = False) -> torch.Tensor:
        t = ckpt.get(name, tuple(shape))
        return t.to(device=device, dtype=router_dtype if keep_fp32 else dtype)

    if cfg.quantization is not None:
        cfg.quantization.check_modules(cfg, ckpt.prefix)

    def expert(module: str, shape) -> torch.Tensor:
        """A routed expert's weight: dequantized (bf16, as stored) when the checkpoint is INT4."""
        if cfg.quantization is None:
            return get(module + ".weight", shape)
        return read_int4_linear(ckpt, module, *shape).dequantize().to(device=device, dtype=dtype)

    H, V = cfg.hidden_size, cfg.vocab_size
    nh, qk, r, rope, v = (cfg.num_attention_heads, cfg.qk_head_dim, cfg.kv_lora_rank,
                          cfg.qk_rope_head_dim, cfg.v_head_dim)
    embed = get("model.embed_tokens.weight", (V, H))
    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        if cfg.q_lora_rank is None:
            q_proj, q_a, q_norm, q_b = get(a + "q_proj.weight", (nh * qk, H)), None, None, None
        else:
            ql = cfg.q_lora_rank
            q_proj = None
            q_a = get(a + "q_a_proj.weight", (ql, H))
            q_norm = get(a + "q_a_layernorm.weight", (ql,))
            q_b = get(a + "q_b_proj.weight", (nh * qk, ql))
        w_kc, w_vc = split_kv_b(get(a + "kv_b_proj.weight", (nh * (cfg.qk_nope_head_dim + v), r)), cfg)
        attn = MlaWeights(
            q_proj=q_proj, q_a_proj=q_a, q_a_norm=q_norm, q_b_proj=q_b,
            kv_a_proj=get(a + "kv_a_proj_with_mqa.weight", (r + rope, H)),
            kv_a_norm=get(a + "kv_a_layernorm.weight", (r,)),
            w_kc=w_kc, w_vc=w_vc,
            o_proj=get(a + "o_proj.weight", (H, nh * v)),
        )
        m = p + "mlp."
        mlp = moe = None
        if cfg.is_moe_layer(i):
            E, I = cfg.n_routed_experts, cfg.moe_intermediate_size
            ex = [f"{m}experts.{e}." for e in range(E)]
            shared = None
            if cfg.n_shared_experts:
                Is = I * cfg.n_shared_experts
                s = m + "shared_experts."
                shared = (get(s + "gate_proj.weight", (Is, H)), get(s + "up_proj.weight", (Is, H)),
                          get(s + "down_proj.weight", (H, Is)))
            moe = MoeWeights(
                router=get(m + "gate.weight", (E, H), keep_fp32=True),
                correction_bias=get(m + "gate.e_score_correction_bias", (E,), keep_fp32=True),
                gate=torch.stack([expert(x + "gate_proj", (I, H)) for x in ex]),
                up=torch.stack([expert(x + "up_proj", (I, H)) for x in ex]),
                down=torch.stack([expert(x + "down_proj", (H, I)) for x in ex]),
                shared=shared,
            )
        else:
            I = cfg.intermediate_size
            mlp = (get(m + "gate_proj.weight", (I, H)), get(m + "up_proj.weight", (I, H)),
                   get(m + "down_proj.weight", (H, I)))
        layers.append(LayerWeights(
            input_norm=get(p + "input_layernorm.weight", (H,)),
            post_attention_norm=get(p + "post_attention_layernorm.weight", (H,)),
            attn=attn, mlp=mlp, moe=moe,
        ))
        if progress is not None:
            progress(i + 1, cfg.num_hidden_layers)
    norm = get("model.norm.weight", (H,))
    if "lm_head.weight" in ckpt:
        lm_head = get("lm_head.weight", (V, H))
    elif cfg.tie_word_embeddings:
        lm_head = embed
    else:
        raise KdtreeError(f"checkpoint {model_dir}: tensor '{ckpt.prefix}lm_head.weight' is missing")
    weights = TargetWeights(embed=embed, layers=layers, norm=norm, lm_head=lm_head)
    return TargetModel(cfg, weights, name=model_dir.name)


def resolve_device(device: str | None) -> torch.device:
    """'cuda' when available and unspecified; a clear error for an unusable device."""
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise KdtreeError(f"device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise KdtreeError(f"device {device!r}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise KdtreeError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise KdtreeError(f"device {device!r}: only cpu and cuda are supported")
    return dev
