"""`kdtree test`: run the Python test suite (pytest)."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated, Optional

import typer

from python_engine.refgen.sync import PROJECT_ROOT


def run_pytest(args: list[str]) -> int:
    """Run pytest from the project root with the given extra arguments; returns its status."""
    return subprocess.call([sys.executable, "-m", "pytest", *args], cwd=PROJECT_ROOT)


def test(
    pytest_args: Annotated[
        Optional[list[str]],
        typer.Argument(help="Extra arguments for pytest (after --), e.g. -- -k tree -x.",
                       show_default=False),
    ] = None,
) -> None:
    """Run the tests (pytest; extra arguments go to pytest)."""
    status = run_pytest(pytest_args or [])
    if status != 0:
        raise typer.Exit(status)


def register(app: typer.Typer) -> None:
    app.command("test", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True})(test)
