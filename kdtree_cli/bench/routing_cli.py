"""`kdtree bench routing`: the routed experts a DDTree round's tokens touch against random
routing (kdtree_cli/bench/routing.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads


def routing(
    pair: Annotated[Optional[list[str]], typer.Option(
        "--pair", help="demo (the trained pair) or agree (a random target and its drafter); repeat for both "
        "\\[default: demo and agree].", show_default=False)] = None,
    prompts: Annotated[int, typer.Option(min=1, help="Prompts per pair.")] = 32,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per prompt.")] = 64,
    max_tree: Annotated[int, typer.Option("--max-tree", min=1, help="The largest round measured, in tokens "
                                          "(root + nodes): T = 1..this.")] = 65,
    seed: Annotated[int, typer.Option(help="Seed of the prompts and of the unrelated-token draws.")] = 0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/cpu/routing-sharing].", file_okay=False,
        show_default=False)] = None,
    threads: Threads = DEFAULT_THREADS,
) -> None:
    """Per MoE layer, the distinct routed experts a DDTree round's T tokens touch (T = 1..65, the real drafter's trees, many prompts) against random routing's E(1 - (1 - k/E)^T) and against unrelated tokens. Writes routing.json (its ratio_by_T table is what `kdtree plan` reads), routing.md and routing.png."""
    from kdtree_cli.bench.routing import DEFAULT_OUT, PAIRS, RoutingBench, run_routing_bench
    from python_engine.errors import KdtreeError

    pairs = tuple(pair or PAIRS)
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown:
        raise KdtreeError(f"--pair {', '.join(unknown)}: choose from {', '.join(PAIRS)}")
    use_threads(threads)
    b = RoutingBench(pairs=pairs, prompts=prompts, max_tokens=max_tokens, max_tree=max_tree, seed=seed,
                     out_dir=out or DEFAULT_OUT, say=lambda s: typer.echo(s, err=True))
    run_routing_bench(b)
    typer.echo((b.out_dir / "routing.md").read_text())


def register(group: typer.Typer) -> None:
    group.command("routing")(routing)
