"""`kdtree bench engine --model ... --emulated`: the round-cost bench of one GPU (here the CPU
emulator, whose times mean nothing) runs every batch x context x budget case, records the
engine's memory report for each, says the collectives of a rank's share did not run, and
records a case the memory limit refuses instead of failing the run."""

from __future__ import annotations

import json

from native_cases import DEMO_DRAFTER, DEMO_TARGET
from typer.testing import CliRunner

from kdtree_cli.app import app
from kdtree_cli.bench.rank_round import case_tokens
from python_engine.native.engine import NativeEngine, NativeOptions


def bench(tmp_path, *extra: str) -> dict:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["bench", "engine", "--model", str(DEMO_TARGET), "--drafter", str(DEMO_DRAFTER),
                                      "--emulated", "--contexts", "12", "--batches", "1,2", "--budgets", "0,4",
                                      "--rounds", "2", "--out", str(out), *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (out / "rank_round.md").is_file()
    return json.loads((out / "rank_round.json").read_text())


def test_rank_round_bench_times_every_case_of_a_share(native_variant, tmp_path):
    r = bench(tmp_path, "--world-size", "2", "--rank", "1")
    assert [(c["batch"], c["context"]) for c in r["cases"]] == [(1, 12), (2, 12)]
    for c in r["cases"]:
        assert set(c["budgets"]) == {"0", "4"}
        for x in c["budgets"].values():
            assert x["rounds_timed"] == 2 and x["round_us"] > 0 and x["collectives"] == "not run"
            assert x["round_us"] >= max(x["stage_us"].values())  # two rounds: medians are means
        # the memory the share reports is what an engine of the same options holds
        opts = NativeOptions(dtype="bfloat16", max_slots=c["batch"], max_tokens=case_tokens(12, 2),
                             max_budget=4, load_format="dummy", world_size=2, rank=1, comm="none")
        with NativeEngine(DEMO_TARGET, DEMO_DRAFTER, opts, variant=native_variant) as eng:
            want = eng.memory()
        assert {k: c["memory"][k] for k in ("weights", "target_cache", "drafter_cache", "workspace")} == \
            {k: want[k] for k in ("weights", "target_cache", "drafter_cache", "workspace")}


def test_rank_round_bench_records_what_does_not_fit(native_variant, tmp_path):
    r = bench(tmp_path, "--gpu-memory-limit", "0.001")
    assert all("refused" in c and "the weights alone are over it" in c["refused"] for c in r["cases"])
