"""The compressed-tensors package as the INT4 oracle: checkpoints quantized, packed and
described by the package itself (none of python_engine's INT4 code), and the package's
model-free dequantizer, which turns an INT4 checkpoint back into float tensors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from python_engine.model.synthetic_checkpoint import save_safetensors_dir, tiny_config

# A tiny target whose quantized widths (hidden 64, moe_intermediate 32) the group size 32
# divides; q LoRA, expert groups, a shared expert, YaRN: every feature on.
INT4_CONFIG = tiny_config(
    hidden_size=64, moe_intermediate_size=32, intermediate_size=96, n_group=4, topk_group=2,
    num_experts_per_tok=3, n_routed_experts=8,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8},
    max_position_embeddings=256,
)
# Kimi's ignore list, written out here rather than imported: the oracle must not borrow ours
KIMI_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]
ROUTED = re.compile(r"(.*mlp\.experts\.\d+\.(gate|up|down)_proj)\.weight$")


def w4a16_scheme():
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    return QuantizationScheme(targets=["Linear"], weights=args)


def package_config(ignore=KIMI_IGNORE) -> dict:
    """The quantization_config as the package serialises it."""
    from compressed_tensors.quantization import QuantizationConfig

    qc = QuantizationConfig(config_groups={"group_0": w4a16_scheme()}, format="pack-quantized",
                            ignore=list(ignore), quantization_status="compressed")
    return qc.model_dump(mode="json")


def package_compress(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """weight_packed / weight_scale / weight_shape of one bf16 weight, all by the package: its
    min-max scales, its quantize, its packing."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization.utils import calculate_qparams

    scheme = w4a16_scheme()
    groups = w.unflatten(-1, (-1, 32))
    scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
    return PackedQuantizationCompressor.compress({"weight": w, "weight_scale": scale}, scheme)


def read_dir(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return tensors


def write_package_int4(bf16_dir: Path, out_dir: Path, shards: int = 1) -> Path:
    """INT4 copy of a bf16 checkpoint made by the package alone (routed experts only)."""
    tensors = {}
    for name, t in read_dir(bf16_dir).items():
        m = ROUTED.match(name)
        if m:
            tensors.update({f"{m.group(1)}.{k}": v for k, v in package_compress(t).items()})
        else:
            tensors[name] = t
    save_safetensors_dir(out_dir, tensors, shards)
    cfg = json.loads((bf16_dir / "config.json").read_text())
    cfg["quantization_config"] = package_config()
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out_dir


def package_dequantize(int4_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of an INT4 checkpoint with the quantized layers as bf16 `.weight`, by the
    package's model-free dequantizer (which also checks no packed tensor is left over)."""
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    return CompressedTensorsDequantizer(str(int4_dir), dtype=torch.bfloat16).validate(read_dir(int4_dir))


def write_dequantized(int4_dir: Path, out_dir: Path) -> Path:
    """The package's dequantized model as a plain float checkpoint (for transformers)."""
    save_safetensors_dir(out_dir, package_dequantize(int4_dir))
    cfg = json.loads((int4_dir / "config.json").read_text())
    del cfg["quantization_config"]
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out_dir
