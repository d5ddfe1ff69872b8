"""Shared pieces of the native tests: the model pairs they run, a relative-error measure,
and the results log the GPU run keeps (KDTREE_NATIVE_RESULTS: one JSON object per line)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from python_engine.model.synthetic_checkpoint import tiny_config, write_random_drafter, write_random_target
from python_engine.model.target_loader import load_target
from python_engine.native.library import PROJECT_ROOT

DEMO_TARGET = PROJECT_ROOT / "refs" / "models" / "demo-target"
DEMO_DRAFTER = PROJECT_ROOT / "refs" / "models" / "demo-drafter"
DEMO_TARGET_INT4 = PROJECT_ROOT / "refs" / "models" / "demo-target-int4"
AGREE_TARGET = PROJECT_ROOT / "refs" / "models" / "agree-target"  # random Kimi widths + a drafter trained to agree
AGREE_DRAFTER = PROJECT_ROOT / "refs" / "models" / "agree-drafter"

# Kimi K2's rope_scaling (config.json of moonshotai/Kimi-K2-Instruct)
KIMI_YARN = {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
             "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}

RANDOM_CONFIGS = {
    # no q LoRA, group-limited routing, rotate-half RoPE
    "no_q_lora_groups": tiny_config(q_lora_rank=None, n_group=4, topk_group=2, num_experts_per_tok=3,
                                    rope_interleave=False),
    # Kimi's MLA widths (the cache row without padding), YaRN, one expert group
    "kimi_like": tiny_config(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                             hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=32, n_routed_experts=8,
                             num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=2.827,
                             rope_scaling=KIMI_YARN, max_position_embeddings=131072),
}


def random_pair(root: Path, name: str, seed: int) -> tuple[Path, Path]:
    """A random target of RANDOM_CONFIGS[name] and a random DFlash drafter for it."""
    tdir = write_random_target(root / f"{name}-target-seed{seed}", RANDOM_CONFIGS[name], seed=seed)
    ddir = write_random_drafter(root / f"{name}-drafter-seed{seed + 1}", load_target(tdir).cfg, seed=seed + 1,
                                num_layers=2, block_size=6)
    return tdir, ddir


def rel(a, b) -> float:
    """||a - b|| / ||b|| over everything (float64); NaN anywhere fails."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def record(**fields) -> None:
    """Append one result to $KDTREE_NATIVE_RESULTS (the GPU run's record), if set."""
    path = os.environ.get("KDTREE_NATIVE_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")
