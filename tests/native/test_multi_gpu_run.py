"""`kdtree run --engine native --gpus 2` on real GPUs (KDTREE_NATIVE_VARIANT=gpu on a machine
with 2 or more; skipped elsewhere): the demo pair split over two GPUs prints the tokens of
the one-GPU run (float32, where a split changes only the order of the sums) and writes rank
0's metrics contract once; a rank killed in the middle of decoding takes the run down with
an error naming it, and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from native_cases import DEMO_DRAFTER, DEMO_TARGET

from python_engine.events import iter_events
from python_engine.native.multi_gpu import visible_gpu_count

VARIANT_GPU = os.environ.get("KDTREE_NATIVE_VARIANT") == "gpu"
pytestmark = pytest.mark.skipif(not VARIANT_GPU or (visible_gpu_count() or 0) < 2,
                                reason="needs KDTREE_NATIVE_VARIANT=gpu and 2 GPUs")
PROMPTS = 'def add(a, b):\n{"prompt": "import os\\n"}\n{"ids": [5, 6, 7, 8]}\nclass Stack:\n'


def kdtree_run(*args, metrics, prompts, max_tokens=48) -> list[str]:
    return [sys.executable, "-m", "kdtree_cli", "run", "--engine", "native", "--model", str(DEMO_TARGET),
            "--drafter", str(DEMO_DRAFTER), "--prompts", str(prompts), "--max-tokens", str(max_tokens),
            "--dtype", "float32", "--ignore-eos", "--metrics", str(metrics), *args]


def outputs(stdout: str) -> str:
    return stdout.split("summary")[0]


def test_two_gpus_print_the_one_gpu_tokens_and_one_contract(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    one = subprocess.run(kdtree_run(metrics=tmp_path / "one.jsonl", prompts=prompts), capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run(kdtree_run("--gpus", "2", metrics=tmp_path / "two.jsonl", prompts=prompts),
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert outputs(two.stdout) == outputs(one.stdout) and "request 3" in two.stdout
    assert "cuda:0-1" in two.stdout and "each GPU's share" in two.stderr
    parsed = list(iter_events((tmp_path / "two.jsonl").read_text().splitlines()))
    assert all(p.warning is None and not p.notes for p in parsed)
    events = [p.event for p in parsed]
    assert [e["event"] for e in events].count("run_start") == 1, "only rank 0 writes events"
    assert events[0]["world_size"] == 2 and events[0]["device"] == "cuda:0-1" and events[-1]["event"] == "run_end"
    rounds = [e for e in events if e["event"] == "round"]
    assert len(rounds) == events[-1]["rounds"] and events[-1]["tokens"] == 4 * 48


def test_a_rank_killed_mid_run_stops_the_run(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS * 8)
    metrics = tmp_path / "m.jsonl"
    launcher = subprocess.Popen(kdtree_run("--gpus", "2", metrics=metrics, prompts=prompts, max_tokens=1500),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while '"event":"round"' not in (metrics.read_text() if metrics.exists() else ""):
            assert launcher.poll() is None and time.monotonic() < deadline, "the run never decoded"
            time.sleep(0.02)
        ranks = sorted((p for p in psutil.Process(launcher.pid).children()
                        if "spawn_main" in " ".join(p.cmdline())), key=lambda p: p.create_time())
        assert len(ranks) == 2
        ranks[1].send_signal(signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 1
    assert "rank 1 (cuda:1) was killed by SIGKILL" in stderr and "stopped on every rank" in stderr
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert last["event"] == "error" and "rank 1" in last["message"]
