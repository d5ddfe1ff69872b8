"""`kdtree bench budget`: `--budget auto` against fixed budgets and AR on the demo pair, in one
process on the same prompts (kdtree_cli/bench/budget_auto.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads


def budget(
    budgets: Annotated[Optional[list[int]], typer.Option(
        "--budget", "-b", min=1, help="A fixed budget to compare (repeat the option) \\[default: 4 8 16 32 64].",
        show_default=False)] = None,
    max_budget: Annotated[int, typer.Option("--max-budget", min=1, help="The largest tree auto considers.")] = 64,
    prompts: Annotated[int, typer.Option(min=1, help="Prompts (lines of Python the demo pair knows).")] = 8,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per prompt.")] = 64,
    repeats: Annotated[int, typer.Option(min=1, help="Times the whole set runs (interleaved, each config "
                                         "leading in turn).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed choosing the prompts.")] = 0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/cpu/budget-auto].", file_okay=False,
        show_default=False)] = None,
    threads: Threads = DEFAULT_THREADS,
) -> None:
    """--budget auto against fixed budgets (and AR) on the demo pair with the torch engine, all in one process on the same prompts, interleaved and repeated: tokens/s, tau, the budgets auto chose, DDTree == AR per config. Writes budget-auto.json, .md and .png; exits 1 when auto is not within 5% of the best fixed budget."""
    from kdtree_cli.bench.budget_auto import DEFAULT_BUDGETS, DEFAULT_OUT, BudgetBench, run_budget_bench

    use_threads(threads)
    b = BudgetBench(budgets=tuple(budgets or DEFAULT_BUDGETS), max_budget=max_budget, prompts=prompts,
                    max_tokens=max_tokens, repeats=repeats, seed=seed, out_dir=out or DEFAULT_OUT,
                    say=lambda s: typer.echo(s, err=True))
    r = run_budget_bench(b)
    typer.echo((b.out_dir / "budget-auto.md").read_text())
    if not r["auto_within"]:
        raise typer.Exit(1)


def register(group: typer.Typer) -> None:
    group.command("budget")(budget)
