"""`kdtree tui`: the live monitor of a DDTree run (acceptance, throughput, stage times)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer


def tui(
    follow: Annotated[Optional[Path], typer.Option(
        "--follow", "-f", metavar="FILE", help="Tail a JSON Lines metrics file as it grows.")] = None,
    replay: Annotated[Optional[Path], typer.Option(
        "--replay", metavar="FILE", help="Replay a recorded metrics file at its own pace.")] = None,
    speed: Annotated[Optional[float], typer.Option(
        "--speed", min=0.0, help="Replay speed factor (2 = twice as fast; 0 = as fast as possible).")] = None,
    run: Annotated[bool, typer.Option(
        "--run", help="Start `kdtree run ARGS --metrics -` here and watch it (ARGS after --).")] = False,
    host: Annotated[Optional[str], typer.Option(
        "--host", metavar="HOST", help="Run `kdtree run ARGS` on HOST over SSH and watch it "
        "(reconnects if the stream drops).")] = None,
    url: Annotated[Optional[str], typer.Option(
        "--url", metavar="URL", help="Follow a running `kdtree serve` at URL, e.g. http://127.0.0.1:8000 "
        "(its /v1/kdtree/events; reconnects if the stream drops).", show_default=False)] = None,
    api_key: Annotated[Optional[str], typer.Option(
        "--api-key", envvar="KDTREE_API_KEY", help="The server's API key, for --url.", show_default=False)] = None,
    interval: Annotated[Optional[float], typer.Option(
        "--interval", min=0.01, help="Seconds between redraws (default 0.08: 12.5 per second).",
        show_default=False)] = None,
    window: Annotated[int, typer.Option(
        "--window", min=1, help="Rounds in the rolling figures (tau, stage times).")] = 100,
    bucket: Annotated[Optional[float], typer.Option(
        "--bucket", min=0.01, help="Seconds of event time per tokens/s sample (default: chosen "
        "from the first rounds, 0.5 s to 60 s).", show_default=False)] = None,
    save_dir: Annotated[Path, typer.Option(
        "--save-dir", help="Where the `s` key writes its SVG screenshot and JSON summary.")] = Path("."),
    no_color: Annotated[bool, typer.Option(
        "--no-color", help="Monochrome output (NO_COLOR in the environment does the same).")] = False,
    args: Annotated[Optional[List[str]], typer.Argument(
        help="Arguments for `kdtree run` (with --run or --host).",
        show_default=False)] = None,
) -> None:
    """Watch a DDTree run live: acceptance, tokens/s, stage times, the last tree.

    Reads metrics events from one source: a file (--follow, --replay), a local run (--run), a run on a remote host (--host) or a server (--url). Keys: p pause, r reset, s snapshot, ? help, q quit.
    """
    from kdtree_cli.tui.launch import build_source, closing_line, run_monitor

    source = build_source(follow=follow, replay=replay, speed=speed, run=run, host=host, url=url,
                          api_key=api_key, args=args or ())
    stats = run_monitor(source, interval=interval, window=window, bucket_s=bucket,
                        no_color=no_color, save_dir=save_dir)
    typer.echo(closing_line(stats))


def register(app: typer.Typer) -> None:
    app.command("tui")(tui)
