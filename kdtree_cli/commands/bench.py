"""`kdtree bench ...`: timings on a GPU next to baselines measured in the same run. Each
subcommand lives in kdtree_cli/bench/ and registers itself on the group here."""

from __future__ import annotations

import importlib

import typer

# modules of kdtree_cli/bench/ with register(group), in the order `kdtree bench --help` lists them
SUBCOMMAND_MODULES = ["moe_cli"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="bench", help="Timings on a GPU next to baselines measured in the same run.",
                        no_args_is_help=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"kdtree_cli.bench.{name}").register(group)
    app.add_typer(group, name="bench")
