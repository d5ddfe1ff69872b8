"""Random DFlash drafter checkpoints in z-lab's format, for a given target.

    python -m python_engine.testing.random_drafter TARGET_DIR OUT_DIR [--layers 1] [--block-size 8]

writes OUT_DIR/config.json (Qwen3-style, with block_size and dflash_config) and
OUT_DIR/model.safetensors. Its drafts are noise, but every code path of the drafter and of
DDTree runs on it; the target's own embeddings and lm_head give it the target's vocab.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from python_engine.model.config import TargetConfig, load_target_config
from python_engine.model.drafter import drafter_weight_shapes
from python_engine.model.drafter_config import drafter_config_dict, drafter_config_from_dict
from python_engine.testing.random_target import save_safetensors_dir


def default_target_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """`count` layers spread evenly from layer 1 to the second-to-last (all layers when
    the target is tiny), as DFlash drafters pick shallow-to-deep features."""
    if num_target_layers <= count:
        return list(range(num_target_layers))
    lo, hi = 1, num_target_layers - 2
    return sorted({round(lo + k * (hi - lo) / max(1, count - 1)) for k in range(count)})


def random_drafter_config(
    target: TargetConfig,
    num_layers: int = 1,
    block_size: int = 8,
    target_layer_ids: list[int] | None = None,
    mask_token_id: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
) -> dict:
    """A small drafter's config.json for `target`, with sizes derived from it."""
    H = target.hidden_size
    ids = target_layer_ids or default_target_layer_ids(target.num_hidden_layers, min(5, max(1, num_layers + 1)))
    return drafter_config_dict(
        hidden_size=H, num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads, head_dim=head_dim or max(8, H // num_heads),
        intermediate_size=intermediate_size or 2 * H, rope_theta=1000000.0,
        max_position_embeddings=target.max_position_embeddings, vocab_size=target.vocab_size,
        num_target_layers=target.num_hidden_layers, block_size=block_size, target_layer_ids=ids,
        mask_token_id=target.vocab_size - 1 if mask_token_id is None else mask_token_id,
        torch_dtype="float32",
    )


def random_drafter_tensors(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    dcfg = drafter_config_from_dict(cfg)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in drafter_weight_shapes(dcfg).items():
        if len(shape) == 1:  # norms, drawn around 1
            out[name] = 1.0 + (torch.rand(shape, generator=g) - 0.5) * 0.6
        else:
            out[name] = torch.randn(shape, generator=g) / shape[1] ** 0.5
    return out


def write_random_drafter(out_dir: str | Path, target: TargetConfig, seed: int = 0, **config_kw) -> Path:
    out_dir = Path(out_dir)
    cfg = random_drafter_config(target, **config_kw)
    save_safetensors_dir(out_dir, random_drafter_tensors(cfg, seed))
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Write a random DFlash drafter for a target checkpoint.")
    ap.add_argument("target_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = load_target_config(args.target_dir)
    path = write_random_drafter(args.out_dir, target, seed=args.seed, num_layers=args.layers,
                                block_size=args.block_size)
    print(path)


if __name__ == "__main__":
    main()
