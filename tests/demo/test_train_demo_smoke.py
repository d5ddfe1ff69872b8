"""`kdtree train-demo --recipe smoke`: every stage end to end on a CPU, the files each stage
promises, resuming, and refusing to mix recipes in one work dir."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def train_demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdtree_cli", "train-demo", "--recipe", "smoke", "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_smoke_recipe_end_to_end_and_resume(tmp_path):
    dirs = ["--data-dir", str(tmp_path / "data"), "--work-dir", str(tmp_path / "work"),
            "--models-dir", str(tmp_path / "models"), "--results-dir", str(tmp_path / "results")]
    proc = train_demo(*dirs, "--steps", "3", "--drafter-steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ran corpus, tokenizer, target, drafter, eval, export" in proc.stdout

    result = json.loads((tmp_path / "results" / "eval.json").read_text())
    assert result["goal"]["all_identical_to_ar"] is True  # DDTree == AR at T=0, every budget and the chain
    assert [r["budget"] for r in result["t0"]] == [4, 16] and result["chain"]["budget"] == 7
    for r in [*result["t0"], result["chain"], result["t1"]]:
        assert r["tau"] >= 1.0 and r["rounds"] > 0 and len(r["depth_acceptance"]) == 7
    assert result["target"]["heldout_ppl"] > 1 and result["corpus"]["sha256"]
    assert result["target_training"]["steps_run"] == 3
    for name in ("summary.md", "target-loss.png", "drafter-loss.png", "drafter-acceptance.png"):
        assert (tmp_path / "results" / name).stat().st_size > 200
    for sub in ("demo-target", "demo-drafter", "demo-target-int4"):
        assert (tmp_path / "models" / sub / "config.json").exists()
        assert (tmp_path / "models" / sub / "tokenizer.json").exists()
    assert "quantization_config" in json.loads((tmp_path / "models" / "demo-target-int4" / "config.json").read_text())

    proc = train_demo(*dirs, "--steps", "3", "--drafter-steps", "3")  # everything done: resume skips
    assert proc.returncode == 0 and "ran export" in proc.stdout and "[target] done earlier" in proc.stdout

    proc = train_demo(*dirs, "--steps", "4", "--drafter-steps", "3")  # another recipe, same work dir
    assert proc.returncode == 1 and "another recipe" in proc.stderr
