"""`kdtree refs`: regenerate the reference bundles (refs/*.kdtr) or check them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from python_engine.errors import KdtreeError


def refs(
    check: Annotated[
        bool, typer.Option("--check", help="Fail if regenerating would change a committed bundle.")
    ] = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option("--only", help="Run only this generator (repeatable).", show_default=False),
    ] = None,
    refs_dir: Annotated[
        Optional[Path],
        typer.Option("--refs-dir", help="Bundle folder (default: the project's refs/).",
                     file_okay=False, show_default=False),
    ] = None,
) -> None:
    """Regenerate the KDTR reference bundles deterministically (or --check them)."""
    from python_engine.refgen import GENERATORS
    from python_engine.refgen.sync import DEFAULT_REFS_DIR, regenerate

    out = Console(soft_wrap=True)  # paths stay on one line for tools that read them
    err = Console(stderr=True, soft_wrap=True)
    folder = refs_dir or DEFAULT_REFS_DIR
    with err.status("generating reference bundles") as status:
        try:
            report = regenerate(
                folder, only, check,
                on_start=lambda name: status.update(f"generating [bold]{name}[/] bundles"),
            )
        except ValueError as exc:
            raise KdtreeError(str(exc)) from None
    for rel in report.changed:
        out.print(f"[yellow]{'would change' if check else 'updated'}[/] {folder / rel}")
        for line in report.why.get(rel, [])[:5]:
            out.print(f"  {line}", highlight=False)
    for rel in report.rounding:
        out.print(f"[dim]kept {folder / rel}: equal to float rounding (this CPU's kernels)[/]")
    for rel in report.added:
        out.print(f"[yellow]{'missing' if check else 'added'}[/] {folder / rel}")
    total = len(report.unchanged) + len(report.rounding) + len(report.changed) + len(report.added)
    if check and not report.clean:
        raise KdtreeError(
            f"{len(report.changed) + len(report.added)} of {total} bundles differ from what "
            "the generators write; run `kdtree refs` and commit refs/"
        )
    verdict = "up to date" if report.clean else "regenerated"
    out.print(f"[green]{total} bundles {verdict}[/] in {folder}")


def register(app: typer.Typer) -> None:
    app.command("refs")(refs)
