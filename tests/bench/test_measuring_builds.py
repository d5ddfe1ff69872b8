"""The measuring builds that `kdtree bench` runs (csrc/dev/): `kernels --phase-clocks` and `moe
--timeline`, on a machine without a GPU. The build is replaced by a stand-in program that
prints what the real one prints (clock lines, timeline records); checked: each goes to a build
root of its own with its -D flags, every case's lines land in the written report with the run's
command, commit, device and date, and the CTAs' exits are grouped by their dispatch rank on
their SM."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from rich.console import Console

from kdtree_cli.bench import moe_timeline, phase_clocks
from kdtree_cli.bench.moe import MoeShape
from kdtree_cli.native_build import flagged_build

RUN_KEYS = {"command", "commit", "device", "date"}


def _program(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env python3\nimport json, sys\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _fake_build(monkeypatch, tmp_path: Path, program: str, body: str) -> list:
    """build_with_nvcc_flags -> a build dir holding the stand-in; records (targets, flags, suffix)."""
    builds = []

    def build(request, flags, suffix, console):
        builds.append((request.targets, flags, suffix))
        build_dir = tmp_path / f"build-{suffix}" / "release"
        _program(build_dir / "bin" / program, body)
        return build_dir

    monkeypatch.setattr(flagged_build, "build_with_nvcc_flags", build)
    return builds


# the stand-in bench_kernels: a clock line naming the case, then its JSON record; a topk case
# prints no clock line (as a build without that kernel's flag would)
BENCH_KERNELS = """
line = open(sys.argv[sys.argv.index("--cases") + 1]).read().strip()
suite = line.split()[0]
if suite != "topk":
    print({"verify_attn": "attn_clk", "tree_build": "tree_clk"}[suite] + " wg0 | " + line)
print(json.dumps({"suite": suite, "ok": True}))
"""


def test_phase_clocks_run_each_case_alone_in_their_own_build(monkeypatch, tmp_path):
    builds = _fake_build(monkeypatch, tmp_path, "bench_kernels", BENCH_KERNELS)
    json_path, md_path = phase_clocks.run_phase_clocks(tmp_path / "out", None, Console(quiet=True))
    assert builds == [(("bench_kernels",), phase_clocks.PHASE_CLOCK_FLAGS, phase_clocks.BUILD_SUFFIX)]
    report = json.loads(json_path.read_text())
    assert set(report["run"]) == RUN_KEYS
    assert [c["case"] for c in report["cases"]] == [c.native_line() for c in phase_clocks.PHASE_CLOCK_CASES]
    md = md_path.read_text()
    for row in report["cases"]:
        assert (tmp_path / "out" / row["log"]).is_file()
        if row["case"].startswith("topk"):
            assert row["clock_lines"] == [] and row["error"] == "no clock line printed"
        else:
            assert len(row["clock_lines"]) == 1 and row["clock_lines"][0].endswith("| " + row["case"])
            assert row["error"] is None and row["clock_lines"][0] in md


def _timeline_records(rng, tokens: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Timeline records whose CTAs sit on drawn SMs; the CTA that is rank r on its SM (by
    blockIdx) exits in [10 r, 10 r + 1) us. Returns the records and, per (n, form), the ranks."""
    records, ranks = [], {}
    for n in tokens:
        rec = {"kind": "timeline", "impl": "int4", "tokens": n, "run": 0, "span_us": 50.0}
        for form in moe_timeline.FORMS:
            sms = int(rng.integers(2, 9))
            per_sm = rng.integers(1, 5, size=sms)
            ctas = rng.permutation(int(per_sm.sum()))  # blockIdx values dealt to the SMs
            raw, start = [], 0
            for sm, count in enumerate(per_sm):
                for rank, cta in enumerate(sorted(ctas[start:start + count])):
                    exit_units = int((10 * rank + rng.uniform(0, 0.99)) * moe_timeline.RAW_UNITS_PER_US)
                    raw.append([int(cta), sm, 0, 0, 1, 2, 3, 4, exit_units])
                start += count
            raw.append([len(raw), 0, 0, 0, -1, -1, -1, -1, -1])  # a CTA that never exited is left out
            rec[form] = {"ctas": len(raw), "raw": [raw[i] for i in rng.permutation(len(raw))]}
            ranks[(n, form)] = {r: int((per_sm > r).sum()) for r in range(int(per_sm.max()))}
        records.append(rec)
    return records, ranks


def test_moe_timeline_groups_exits_by_dispatch_rank(monkeypatch, tmp_path, rng):
    records, ranks = _timeline_records(rng, moe_timeline.DEFAULT_TIMELINE_TOKENS)
    lines = [{"kind": "moe", "impl": "int4", "tokens": 1}, *records]
    body = f"for r in {json.dumps(lines)}:\n    print(json.dumps(r))\n"
    body += "args = sys.argv\nassert args[args.index('--reps') + 1] == '3'\n"
    builds = _fake_build(monkeypatch, tmp_path, "bench_moe", body)
    jsonl, md = moe_timeline.run_timeline(moe_timeline.DEFAULT_TIMELINE_TOKENS, 1, 3, 0, tmp_path / "out", True,
                                          MoeShape(experts=16, hidden=64, inter=32), Console(quiet=True))
    assert builds == [(("bench_moe",), moe_timeline.TIMELINE_FLAGS, moe_timeline.BUILD_SUFFIX)]
    written = [json.loads(l) for l in jsonl.read_text().splitlines()]
    assert set(written[0]) == RUN_KEYS | {"kind"} and written[1:] == lines
    for rec in records:
        for form in moe_timeline.FORMS:
            got = moe_timeline.exits_by_dispatch_rank(rec, form)
            assert {r: len(v) for r, v in got.items()} == ranks[(rec["tokens"], form)]
            for r, exits in got.items():
                assert all(10 * r <= e < 10 * r + 1 for e in exits)
            assert moe_timeline.rank_cells(got) in md.read_text()
    assert md.read_text().count("| int4 |") == len(records) * len(moe_timeline.FORMS)


def test_moe_timeline_without_build_runs_the_flagged_build_root(monkeypatch, tmp_path):
    """--no-build: the program of build-w4-timeline/, never the product's build/."""
    ran = []
    monkeypatch.setattr(moe_timeline, "run_native", lambda program, *a: ran.append(program) or [])
    monkeypatch.setattr(flagged_build, "build_with_nvcc_flags", lambda *a: pytest.fail("built"))
    moe_timeline.run_timeline((1,), 1, 1, 0, tmp_path / "out", False, MoeShape(experts=16, hidden=64, inter=32),
                              Console(quiet=True))
    assert ran and ran[0].parts[-4:] == ("build-w4-timeline", "release", "bin", "bench_moe")
