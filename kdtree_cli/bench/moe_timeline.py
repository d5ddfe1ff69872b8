"""`kdtree bench moe --timeline`: the W4A16 kernel's launches laid out in time, CTA by CTA.
bench_moe is built with -DKD_W4_TIMELINE (csrc/dev/moe_w4a16_timeline.h: each CTA's
%globaltimer at six points of its life, its SM and expert) in a build root of its own, so the
library in build/ stays the product, and run on random routings at decode sizes (it lays out
a few layers at n <= 8). moe-timeline.jsonl keeps bench_moe's records; moe-timeline.md, with
the run's command, commit, device and date, gives per layer and form the exit times of the
CTAs by their dispatch rank on their SM (the SM's CTAs ordered by blockIdx: the order the block
scheduler handed them to it)."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from .moe import PROGRAM, MoeShape, routing_tensors, run_native
from .provenance import run_record

TIMELINE_FLAGS = ("-DKD_W4_TIMELINE",)
BUILD_SUFFIX = "w4-timeline"  # build -> build-w4-timeline
DEFAULT_TIMELINE_TOKENS = (1, 8)  # bench_moe lays out layers at n <= 8 only
FORMS = ("gate_up", "down")
# bench_moe's "raw" rows: [cta, smid, expert, then the six points (entry, expert, ready,
# first_block, loop_end, exit) in 10 ns units from the layer's first start, -1 if not reached]
RAW_EXIT = 8
RAW_UNITS_PER_US = 100


def cta_exits(record: dict, form: str) -> list[tuple[int, int, float]]:
    """(cta, sm, exit us) of every CTA of one form that exited."""
    return [(r[0], r[1], r[RAW_EXIT] / RAW_UNITS_PER_US) for r in record.get(form, {}).get("raw", [])
            if r[RAW_EXIT] >= 0]


def exits_by_dispatch_rank(record: dict, form: str) -> dict[int, list[float]]:
    """{rank: exit us of the CTAs that were rank-th on their SM}, the SM's CTAs by blockIdx."""
    by_sm: dict[int, list[tuple[int, float]]] = {}
    for cta, sm, exit_us in cta_exits(record, form):
        by_sm.setdefault(sm, []).append((cta, exit_us))
    ranks: dict[int, list[float]] = {}
    for per_sm in by_sm.values():
        for rank, (_, exit_us) in enumerate(sorted(per_sm)):
            ranks.setdefault(rank, []).append(exit_us)
    return dict(sorted(ranks.items()))


def rank_cells(ranks: dict[int, list[float]]) -> str:
    """'rank 0 (132 CTAs) 10.2 (9.8-11.0); ...': median and range of each rank's exits, us."""
    return "; ".join(f"rank {k} ({len(v)} CTAs) {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
                     for k, v in ranks.items())


def markdown(run: dict, timelines: list[dict]) -> str:
    lines = ["# W4A16 per-CTA timeline (bench_moe built with -DKD_W4_TIMELINE)", "",
             *(f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in run.items()), "",
             "Exit time of each CTA (us from the layer's first CTA start) by its dispatch rank on its SM: "
             "median (min-max).", "", "| impl | n | run | form | CTAs | span us | exits by dispatch rank |",
             "|---|---|---|---|---|---|---|"]
    for rec in timelines:
        for form in FORMS:
            lines.append(f"| {rec['impl']} | {rec['tokens']} | {rec['run']} | {form} | {rec.get(form, {}).get('ctas', 0)} "
                         f"| {rec.get('span_us', 0):.1f} | {rank_cells(exits_by_dispatch_rank(rec, form))} |")
    return "\n".join(lines) + "\n"


def run_timeline(tokens: tuple[int, ...], sets: int, reps: int, seed: int, out_dir: Path, build: bool,
                 shape: MoeShape, console) -> tuple[Path, Path]:
    """Build (unless told not to), run, write moe-timeline.jsonl and .md; their paths. The caller
    checks for a GPU first."""
    from dataclasses import replace

    from kdtree_cli.native_build.driver import BuildRequest, build_dir_for
    from kdtree_cli.native_build.flagged_build import build_with_nvcc_flags, flagged_build_root
    from python_engine.kdtr import write_kdtr

    request = BuildRequest(targets=(PROGRAM,))
    if build:
        build_dir = build_with_nvcc_flags(request, TIMELINE_FLAGS, BUILD_SUFFIX, console)
    else:
        build_dir = build_dir_for(replace(request, build_root=flagged_build_root(request.build_root, BUILD_SUFFIX)))
    log = lambda line: console.print(f"[dim]{line}[/]", highlight=False)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="kdtree-moe-timeline-") as tmp:
        routing = write_kdtr(Path(tmp) / "routing.kdtr", routing_tensors(shape, tokens, sets, seed))
        records = run_native(build_dir / "bin" / PROGRAM, routing, reps, log)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = run_record()
    jsonl_path, md_path = out_dir / "moe-timeline.jsonl", out_dir / "moe-timeline.md"
    jsonl_path.write_text("".join(json.dumps(r) + "\n" for r in [{"kind": "run", **run}, *records]))
    md_path.write_text(markdown(run, [r for r in records if r.get("kind") == "timeline"]))
    return jsonl_path, md_path
