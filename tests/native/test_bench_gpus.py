"""`kdtree bench gpus` and `kdtree bench collectives` without GPUs: they refuse clearly; the
decoding worker's summary (through the CPU-emulated engine, one rank) and both reports on
records made from it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kdtree_cli.bench import collectives, gpus
from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from python_engine.native.multi_gpu import Rank


@pytest.mark.parametrize("command", ["gpus", "collectives"])
def test_refuses_without_gpus(command):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the refusal cannot be seen here")
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "bench", command], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "needs a CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_one_gpu_is_not_a_comparison():
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "bench", "gpus", "--gpus", "1"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_worker_and_report_on_the_emulated_engine(native_variant):
    prompts = gpus._prompts(gpus.GpusBench(prompts=2), 1024, demo=True)
    job = {"target": str(DEFAULT_TARGET), "drafter": str(DEFAULT_DRAFTER), "dtype": "float32", "prompts": prompts,
           "max_tokens": 6, "budget": 8, "variant": native_variant}
    r = gpus._decode_rank(Rank(0, 1, 0, "none", b""), job)
    assert [len(t) for t in r["tokens"]] == [6, 6]
    assert r["rounds"] > 0 and r["tau"] >= 1.0 and r["collectives_per_round"] == 0
    assert all(r["stage_us_per_round"][k] > 0 for k in ("draft", "tree_build", "verify"))
    one = {k: v for k, v in r.items() if k != "tokens"} | {"collective_share": 0.0}
    two = one | {"tokens_per_s": 2 * one["tokens_per_s"], "collectives_per_round": 14.0,
                 "collective_us_per_round": 500.0, "collective_share": 0.2}
    report = {"gpus": 2, "commit": "abc", "date": "d", "prompts": 2, "max_tokens": 6, "budget": 8,
              "models": {"demo": {"runs": {"float32": {"requests": 2, "budget": 8, "identical_to_1gpu": False,
                                                       "speedup": 2.0, "gpus_1": one, "gpus_2": two}}}}}
    md = gpus.gpus_markdown(report)
    assert "| demo | float32 | 2 x 8 | 2 | **no** |" in md and "| 2.00 |" in md and "0.500 (14)" in md


def test_collectives_report():
    cases = [dict(c, bytes=c["rows"] * c["cols"] * 2, us=40.0) for c in collectives._cases(2)]
    md = collectives.collectives_markdown({"gpus": 2, "commit": "abc", "date": "d", "calls": 20, "runs": 5,
                                           "cases": cases})
    assert md.count("| all_reduce |") == 5 and md.count("| all_gather |") == 3
    assert "| all_gather | 65 x 81920 | float32 |" in md  # Kimi's vocabulary split 2 ways
