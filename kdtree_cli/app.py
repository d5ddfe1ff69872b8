"""The `kdtree` typer app. Each command lives in its own module under kdtree_cli/commands/
and registers itself here; heavy imports (torch, textual, fabric) happen inside commands so
that `kdtree --help` is instant and the engine path runs where the TUI or SSH libraries are
absent (the GPU box has neither)."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from python_engine.errors import KdtreeError

# Order is the order `kdtree --help` lists them in.
COMMAND_MODULES = [
    "demo", "train_demo", "train_agree",
    "run", "serve",
    "quantize",
    "refs",
    "build",
    "test", "engine_check",
    "bench",
    "tui",
    "deploy", "hosts",
    "plan",
]

app = typer.Typer(
    name="kdtree",
    help="DDTree speculative decoding for DeepSeek-V3 / Kimi K2.6-class models: "
    "a PyTorch reference engine, a native CUDA engine, and the tools around them.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"kdtree_cli.commands.{_name}").register(app)

err_console = Console(stderr=True, soft_wrap=True)


def main() -> None:
    """Console entry point: project errors become one red line and exit status 1."""
    try:
        app(standalone_mode=True)
    except KdtreeError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(1)
