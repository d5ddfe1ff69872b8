"""Fixtures for the decode tests: tiny random targets and drafters on disk, and torch
pinned to one thread (tests/torch_threads.py says why)."""

from __future__ import annotations

import pytest
from torch_threads import single_thread  # noqa: F401 (autouse fixture for this folder)

from python_engine.model.synthetic_checkpoint import tiny_config, write_random_drafter, write_random_target
from python_engine.model.target_loader import load_target

DECODE_CONFIGS = {
    "groups_yarn": tiny_config(n_group=4, topk_group=2, num_experts_per_tok=3, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 1.0,
        "mscale_all_dim": 1.0}),
    "no_q_lora": tiny_config(q_lora_rank=None, rope_interleave=False, n_group=1, topk_group=1,
                             num_hidden_layers=2),
}


@pytest.fixture(scope="session")
def decode_models(tmp_path_factory):
    """name -> (target dir, random DFlash drafter dir); weight seeds fixed and in the names."""
    root = tmp_path_factory.mktemp("decode")
    out = {}
    for i, (name, cfg) in enumerate(DECODE_CONFIGS.items()):
        tdir = write_random_target(root / f"{name}-target-seed{31 + i}", cfg, seed=31 + i)
        tcfg = load_target(tdir).cfg
        ddir = write_random_drafter(root / f"{name}-drafter-seed{41 + i}", tcfg, seed=41 + i,
                                    num_layers=2, block_size=6)
        out[name] = (tdir, ddir)
    return out
