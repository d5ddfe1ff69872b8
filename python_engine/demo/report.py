"""Running the demo with its metrics stream, and printing what it did: the prompt and the
continuation as text, then tau, tokens/s, the AR baseline and the speedup."""

from __future__ import annotations

import json
import sys

from python_engine.demo.runner import DemoResult, DemoSettings, run_demo
from python_engine.errors import KdtreeError
from python_engine.events import EventWriter, open_metrics


def run_with_metrics(settings: dict, metrics: str | None) -> DemoResult:
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    with open_metrics(metrics, sys.stdout) as stream:
        events = EventWriter(stream)
        try:
            with err.status("kdtree demo") as status:
                return run_demo(DemoSettings(**settings), events,
                                on_status=lambda text: status.update(f"kdtree demo: {text}"))
        except KdtreeError as exc:
            events.emit("error", message=str(exc))
            raise


def print_result(r: DemoResult, to_stderr: bool = False, as_json: bool = False) -> None:
    from rich.console import Console

    out = Console(file=sys.stderr if to_stderr else sys.stdout, highlight=False, soft_wrap=True)
    if as_json:
        out.print_json(json.dumps(r.to_dict()))
        return
    out.print("[bold]prompt[/]")
    out.print(r.prompt, markup=False)
    out.print(f"[bold]continuation[/] ({len(r.ddtree.tokens)} tokens, DDTree)")
    out.print(r.text, markup=False)
    out.print()
    for note in r.notes:
        out.print(f"[dim]engine {note}[/]")
    if r.temperature == 0:
        same = "[green]identical to AR[/]" if r.identical else "[red]DIFFERS from AR[/]"
    else:
        same = f"sampled at T={r.temperature:g} (DDTree keeps AR's distribution, not its text)"
    out.print(f"[bold]summary[/] engine {r.engine} on {r.device} ({r.dtype}), budget {r.budget}: {same}")
    out.print(f"  DDTree  tau {r.ddtree.tau:.2f} tokens/forward, {r.ddtree.tokens_per_s:8.1f} tokens/s "
              f"({r.ddtree.rounds} target forwards)")
    out.print(f"  AR               {'':>17}{r.ar.tokens_per_s:8.1f} tokens/s "
              f"({r.ar.rounds} target forwards)")
    out.print(f"  speedup {r.speedup:.2f}x: {r.ddtree.tau:.2f} tokens per target forward, but a DDTree round "
              f"(drafter, tree, verify) takes as long as {r.round_cost:.1f} AR steps")
