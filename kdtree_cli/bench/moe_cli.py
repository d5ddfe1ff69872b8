"""`kdtree bench moe`: the routed experts of one Kimi K2.6-shaped MoE layer, INT4 and bf16 next
to torch's grouped GEMM and each format's floor (the command; kdtree_cli/bench/moe.py does the
work and is imported only when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def moe(
    tokens: Annotated[
        Optional[list[int]],
        typer.Option("--tokens", "-n", help="Tokens per forward (repeat the option) \\[default: 1 8 16 64 128].",
                     min=1, show_default=False),
    ] = None,
    sets: Annotated[int, typer.Option(help="Random routings per n, used in turn (weights stay out of L2).",
                                      min=1)] = 4,
    reps: Annotated[int, typer.Option(help="Timed runs per measurement (medians).", min=1)] = 20,
    seed: Annotated[int, typer.Option(help="Seed of the routings.")] = 0,
    out_dir: Annotated[
        Optional[Path], typer.Option("--out-dir", help="Where moe.json and moe.md go "
                                     "\\[default: results/<device>/bench].", file_okay=False, show_default=False),
    ] = None,
    build: Annotated[bool, typer.Option("--build/--no-build", help="Build bin/bench_moe for this GPU first.")] = True,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="Instead of the timings: the INT4 (W4A16) kernel's launches laid out CTA by CTA at n = 1 "
        "and 8 (or --tokens, at most 8). Builds bench_moe with -DKD_W4_TIMELINE (csrc/dev/moe_w4a16_timeline.h: each "
        "CTA's %globaltimer at six points, its SM and expert) in build-w4-timeline/ and writes moe-timeline.jsonl "
        "(bench_moe's records) and moe-timeline.md (each CTA's exit time by its dispatch rank on its SM).")] = False,
) -> None:
    """Time one Kimi K2.6-shaped MoE layer (384 experts of 7168 x 2048, top-8, random routing): INT4 (W4A16) and bf16 grouped GEMMs, torch's _grouped_mm (bf16), and each format's floor (distinct active experts' bytes over the copy bandwidth measured in the same run). Needs a GPU."""
    from rich.console import Console
    from rich.table import Table

    from kdtree_cli.bench import moe as bench

    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    if timeline:
        _timeline(tokens, sets, reps, seed, out_dir, build, err)
        return
    json_path, md_path, rows = bench.run(tuple(tokens or bench.DEFAULT_TOKENS), sets, reps, seed, out_dir, build,
                                         bench.MoeShape(), err)
    table = Table("n", "experts", "INT4 ms", "INT4/floor", "bf16 ms", "bf16/floor", "torch ms", "torch/INT4")
    for r in rows:
        table.add_row(str(r.tokens), f"{r.distinct_experts:.1f}", f"{r.int4_ms:.4f}", f"{r.int4_over_floor:.2f}",
                      f"{r.bf16_ms:.4f}", f"{r.bf16_ms / r.bf16_floor_ms:.2f}",
                      "n/a" if r.torch_ms is None else f"{r.torch_ms:.4f}",
                      "n/a" if r.torch_over_int4 is None else f"{r.torch_over_int4:.2f}")
    out.print(table)
    for goal, ok in bench.goals(rows).items():
        out.print(f"{goal}: {'met' if ok else 'not met' if ok is not None else 'not measured'}", highlight=False)
    out.print(f"wrote {json_path} and {md_path}", highlight=False)


def _timeline(tokens: Optional[list[int]], sets: int, reps: int, seed: int, out_dir: Optional[Path], build: bool,
              err) -> None:
    """kdtree bench moe --timeline."""
    from kdtree_cli.bench import moe as bench
    from kdtree_cli.bench.gpu import device_facts
    from kdtree_cli.bench.kernels import default_out_dir
    from kdtree_cli.bench.moe_timeline import DEFAULT_TIMELINE_TOKENS, run_timeline
    from python_engine.project import PROJECT_ROOT

    tokens_laid_out = tuple(tokens or DEFAULT_TIMELINE_TOKENS)
    if max(tokens_laid_out) > max(DEFAULT_TIMELINE_TOKENS):
        raise typer.BadParameter(f"bench_moe lays out layers at n <= {max(DEFAULT_TIMELINE_TOKENS)} only",
                                 param_hint="--tokens")
    bench.require_gpu()
    out_dir = out_dir or default_out_dir(device_facts(PROJECT_ROOT))
    jsonl_path, md_path = run_timeline(tokens_laid_out, sets, reps, seed, out_dir, build, bench.MoeShape(), err)
    typer.echo(md_path.read_text())
    typer.echo(f"wrote {jsonl_path} and {md_path}")


def register(group: typer.Typer) -> None:
    group.command("moe")(moe)
