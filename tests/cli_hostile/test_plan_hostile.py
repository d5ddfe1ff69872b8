"""Hostile input for `kdtree plan`: each bad value or file ends in one error line that
names it, exit status 1, no traceback."""

from __future__ import annotations

import pytest

from test_cli_hostile import kdtree_measured, one_error_line


@pytest.mark.parametrize("args,says", [
    (["--profile", "rtx-pro-6000", "--allreduce-us", "inf"], "--allreduce-us inf: give a finite number"),
    (["--profile", "rtx-pro-6000", "--gpu-memory-limit", "1e9"], "--gpu-memory-limit 1e+09 GiB is more than"),
    (["--profile", "rtx-pro-6000", "--context", "10000000"], "--context 10000000: over the model's"),
    (["--profile", "rtx-pro-6000", "--gpus", "7"], "divisible by 7"),
    (["--profile", "tpu"], "device profile 'tpu' is not known"),
    (["--host", "nosuch"], "unknown host 'nosuch'"),
    (["--profile", "rtx-pro-6000", "--tau", "8:5"], "--tau '8:5': give BUDGET=TAU pairs"),
    (["--profile", "rtx-pro-6000", "--budgets", "-1,8"], "give budgets >= 0"),
    (["--profile", "rtx-pro-6000", "--interconnect", "ethernet"], "--interconnect 'ethernet'"),
    (["--profile", "rtx-pro-6000", "--model", "BAD_MODEL"], "is not valid JSON"),
    (["--profile", "rtx-pro-6000", "--routing", "BAD_ROUTING"], "routing file"),
], ids=["allreduce_inf", "limit_over_card", "context_over_model", "gpus_7", "profile_unknown", "host_unknown",
        "tau_format", "budget_negative", "interconnect_unknown", "config_not_json", "routing_not_json"])
def test_plan_refuses_with_one_line_naming_the_value(args, says, tmp_path):
    bad_model = tmp_path / "model"
    bad_model.mkdir()
    (bad_model / "config.json").write_text("{")
    bad_routing = tmp_path / "routing.json"
    bad_routing.write_text("[1, 2")
    args = [str(bad_model) if a == "BAD_MODEL" else str(bad_routing) if a == "BAD_ROUTING" else a for a in args]
    status, _, err, _ = kdtree_measured("plan", *args)
    assert status == 1
    assert says in one_error_line(err)
