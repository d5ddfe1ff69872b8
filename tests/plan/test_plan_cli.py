"""`kdtree plan` end to end: the ct200 host of kdtree.toml with the Kimi K2.6 configs."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kdtree_cli.app import app
from python_engine.model.drafter_config import load_drafter_config
from python_engine.plan.weights import drafter_weights

runner = CliRunner()


def plan_json(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_ct200_plan_counts_the_drafter_and_names_every_input():
    p = plan_json("--host", "ct200", "--model", "refs/configs/kimi-k2.6", "--drafter", "refs/configs/kimi-k2.6-dflash")
    assert p["host"]["profile"] == "rtx-pro-6000" and p["host"]["gpus"] == 8 and p["host"]["interconnect"] == "pcie"
    m = p["memory"]
    d = load_drafter_config("refs/configs/kimi-k2.6-dflash")
    assert m["weights_gb"]["drafter"] * 1e9 == drafter_weights(d)
    assert abs(sum(m["weights_gb"].values()) - m["weights_total_gb"]) < 1e-9
    assert m["used_gb"] + m["left_gb"] + m["reserve_gb"] == __import__("pytest").approx(m["limit_gb"])
    fits = [r["largest_context"] for r in m["largest_context_by_slots"]]
    assert fits[0] > 0 and fits == sorted(fits, reverse=True)
    assert [r["budget"] for r in p["rounds"]] == [0, 4, 8, 16, 32, 64]
    assert p["rounds"][0]["mode"] == "AR" and all(r["tokens_per_s"] > 0 for r in p["rounds"])
    for i in p["inputs"]:
        assert i["source"] and i["kind"] in ("measured", "spec", "projection", "assumption", "user",
                                             "measured (published)"), i


def test_profile_and_limit_options_and_their_errors():
    small = plan_json("--profile", "rtx-pro-6000", "--gpus", "8", "--gpu-memory-limit", "90", "--budgets", "0,8")
    full = plan_json("--profile", "rtx-pro-6000", "--gpus", "8", "--budgets", "0,8")
    assert small["memory"]["left_gb"] < full["memory"]["left_gb"]
    assert small["memory"]["largest_context_by_slots"][0]["largest_context"] < \
        full["memory"]["largest_context_by_slots"][0]["largest_context"]
    nv = plan_json("--profile", "h200", "--gpus", "8", "--interconnect", "nvlink", "--budgets", "0,8")
    assert nv["rounds"][1]["collectives_ms"] < full["rounds"][1]["collectives_ms"]
    for args, words in ((["--host", "ct200", "--profile", "h200"], "--host NAME"),
                        (["--profile", "rtx-pro-6000", "--budgets", "x"], "--budgets"),
                        (["--profile", "rtx-pro-6000", "--gpus", "5"], "divisible by 5"),
                        (["--profile", "rtx-pro-6000", "--gpu-memory-limit", "500"], "more than")):
        result = runner.invoke(app, ["plan", *args])
        assert result.exit_code != 0
        assert words in str(result.exception) + result.output, (args, result.output)


def test_ct200_tables_say_what_a_user_needs(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["plan", "--host", "ct200"])
    assert result.exit_code == 0, result.output
    for words in ("memory per GPU", "drafter", "replicated on every GPU", "largest context",
                  "projected round", "tokens/s", "PCIe estimate (no PCIe measurement exists)",
                  "results/h200/bench/all-bench.md (commit 7508c8f)", "z-lab/Kimi-K2.5-DFlash"):
        assert words in result.output, words
