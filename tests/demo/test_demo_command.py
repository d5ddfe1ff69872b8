"""`kdtree demo` as CI runs it: DDTree and AR must produce the same text at T = 0, on the
committed demo pair when it is there, and always on a tiny pair made by the smoke recipe."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from python_engine.demo.defaults import DEFAULT_TARGET, INT4_TARGET
from python_engine.demo.engines import select_engine
from python_engine.errors import KdtreeError
from python_engine.events import iter_events


def kdtree(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdtree_cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def demo_json(*args: str) -> dict:
    proc = kdtree("demo", "--json", "--device", "cpu", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _check_identical(result: dict, max_tokens: int) -> None:
    assert result["engine"] == "torch" and result["device"] == "cpu"
    assert result["identical_to_ar"] is True
    assert 1 <= result["ddtree"]["tokens"] <= max_tokens
    assert result["ddtree"]["tokens"] == result["ar"]["tokens"]
    # tau is tokens per target forward: the rounds must account for every token after the first
    assert result["ddtree"]["rounds"] >= 1 and result["ddtree"]["tau"] >= 1.0
    assert result["ar"]["rounds"] == result["ar"]["tokens"] - 1


@pytest.mark.skipif(not (DEFAULT_TARGET / "config.json").exists(), reason="demo pair not committed yet")
def test_demo_on_the_shipped_pair_matches_ar():
    result = demo_json("--max-tokens", "48", "--budget", "32")
    _check_identical(result, 48)
    assert result["text"].strip(), "the demo pair should write something"
    # a trained pair accepts more than one token per forward on its own kind of text
    assert result["ddtree"]["tau"] > 1.5


@pytest.mark.skipif(not (DEFAULT_TARGET / "config.json").exists(), reason="demo pair not committed yet")
def test_shipped_pairs_fit_the_repository_limits():
    from python_engine.train.export import TARGETS, check_pair_sizes

    for target in TARGETS:  # the bf16 and the INT4 target, each with the one drafter
        assert check_pair_sizes(DEFAULT_TARGET.parent, target) <= 24 * 2**20


@pytest.mark.skipif(not (INT4_TARGET / "config.json").exists(), reason="INT4 demo target not committed yet")
def test_demo_on_the_shipped_int4_target_matches_ar():
    result = demo_json("--int4", "--max-tokens", "48", "--budget", "32")
    _check_identical(result, 48)
    assert result["text"].strip() and result["ddtree"]["tau"] > 1.5  # the bf16 drafter still helps


@pytest.mark.skipif(not (INT4_TARGET / "config.json").exists(), reason="INT4 demo target not committed yet")
def test_shipped_int4_target_is_kdtree_quantize_of_the_shipped_target(tmp_path):
    """Byte for byte: a retrained demo-target must come with its INT4 twin regenerated."""
    from python_engine.train.export import write_int4_target

    (tmp_path / "demo-target").symlink_to(DEFAULT_TARGET)
    fresh = write_int4_target(tmp_path)
    shipped = sorted(p.name for p in INT4_TARGET.iterdir())
    assert sorted(p.name for p in fresh.iterdir()) == shipped
    stale = [n for n in shipped if (fresh / n).read_bytes() != (INT4_TARGET / n).read_bytes()]
    assert not stale, (f"{INT4_TARGET} is not `kdtree quantize` of {DEFAULT_TARGET} ({stale} differ): run "
                       f"kdtree quantize {DEFAULT_TARGET} {INT4_TARGET} --force --shard-size 7")


def test_demo_on_a_smoke_pair_matches_ar_and_streams_events(smoke_pair, tmp_path):
    models = smoke_pair.models_dir
    events_path = tmp_path / "events.jsonl"
    result = demo_json("--model", str(models / "demo-target"), "--drafter", str(models / "demo-drafter"),
                       "--max-tokens", "20", "--budget", "16", "--ignore-eos", "--prompt", "def f(x):\n    return",
                       "--metrics", str(events_path))
    _check_identical(result, 20)
    assert result["ddtree"]["tokens"] == 20  # --ignore-eos: the full count
    parsed = list(iter_events(events_path.read_text().splitlines()))
    assert all(p.event is not None for p in parsed), [p.warning for p in parsed if p.warning]
    kinds = [p.event["event"] for p in parsed]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    rounds = [p.event for p in parsed if p.event["event"] == "round"]
    assert len(rounds) == result["ddtree"]["rounds"]
    # every token after the first comes from a round; the last round may overshoot the count
    accepted = [r["accept_len"] for r in rounds]
    assert sum(accepted[:-1]) < result["ddtree"]["tokens"] - 1 <= sum(accepted)
    # the speedup line's decomposition: tokens/s ratio = tokens per round / a round's cost in AR steps
    dd, ar = result["ddtree"], result["ar"]
    round_cost = (dd["decode_s"] / dd["rounds"]) / (ar["decode_s"] / ar["rounds"])
    assert result["round_cost_ar_steps"] == pytest.approx(round_cost, rel=1e-2)
    per_round = (dd["tokens"] - 1) / dd["rounds"]
    assert result["speedup"] == pytest.approx(per_round / round_cost * ar["rounds"] / (ar["tokens"] - 1), rel=1e-2)


def test_demo_text_output_and_missing_pair(smoke_pair, tmp_path):
    models = smoke_pair.models_dir
    proc = kdtree("demo", "--device", "cpu", "--model", str(models / "demo-target"), "--drafter",
                  str(models / "demo-drafter"), "--max-tokens", "8", "--prompt", "import os\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for needle in ("prompt", "continuation", "tau", "tokens/s", "AR", "speedup", "identical to AR"):
        assert needle in proc.stdout
    proc = kdtree("demo", "--model", str(tmp_path / "nowhere"), "--max-tokens", "4")
    assert proc.returncode == 1 and "train-demo" in proc.stderr


def test_engine_selection_falls_back_to_torch_on_cpu(smoke_pair):
    models = smoke_pair.models_dir
    engine, notes = select_engine("auto", models / "demo-target", models / "demo-drafter", "cpu")
    assert engine.name == "torch" and any(n.startswith("native:") for n in notes)
    with pytest.raises(KdtreeError, match="native"):
        select_engine("native", models / "demo-target", models / "demo-drafter", "cpu")


def test_tui_child_command_streams_pure_events_on_stdout(smoke_pair):
    """--tui runs `kdtree demo <same args> --metrics -` under the monitor: its stdout must be
    nothing but metrics events, the text going to stderr."""
    from kdtree_cli.commands.demo import child_args

    models = smoke_pair.models_dir
    settings = dict(target_dir=models / "demo-target", drafter_dir=models / "demo-drafter", prompt="x = [1, 2",
                    max_tokens=10, budget=8, temperature=0.0, seed=3, engine="torch", device="cpu",
                    ignore_eos=True)
    proc = kdtree("demo", *child_args(settings), "--metrics", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = list(iter_events(proc.stdout.splitlines()))
    assert parsed and all(p.event is not None for p in parsed)
    assert parsed[0].event["event"] == "run_start" and parsed[0].event["budget"] == 8
    assert parsed[-1].event["event"] == "run_end" and parsed[-1].event["tokens"] == 10
    assert "speedup" in proc.stderr
