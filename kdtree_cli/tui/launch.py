"""From command-line choices to a running monitor: pick the source, run the app, return
its figures. Kept apart from the typer command so `kdtree run --tui` can call it too."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Sequence

from kdtree_cli.tui.sources.base import EventSource
from python_engine.errors import KdtreeError


def build_source(
    *,
    follow: Path | None = None,
    replay: Path | None = None,
    speed: float | None = None,
    run: bool = False,
    host: str | None = None,
    url: str | None = None,
    api_key: str | None = None,
    args: Sequence[str] = (),
) -> EventSource:
    """Exactly one of follow / replay / run / host / url; args only for run and host."""
    chosen = [name for name, on in (("--follow", follow is not None), ("--replay", replay is not None),
                                    ("--run", run), ("--host", host is not None), ("--url", url is not None)) if on]
    if len(chosen) != 1:
        what = "none" if not chosen else " and ".join(chosen)
        raise KdtreeError(
            f"choose one event source (got {what}): --follow FILE, --replay FILE [--speed X], "
            "--run -- <kdtree run args>, --host HOST -- <kdtree run args>, or --url http://HOST:PORT "
            "(a kdtree serve)"
        )
    if speed is not None and replay is None:
        raise KdtreeError("--speed only applies to --replay")
    if args and not (run or host):
        raise KdtreeError(f"unexpected arguments {' '.join(args)!r}: only --run and --host take "
                          "arguments (after --)")
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise KdtreeError(f"--url {url!r}: give the server's address, e.g. http://127.0.0.1:8000")
        from kdtree_cli.tui.sources.server_url import ServerSource

        return ServerSource(url, api_key)
    if follow is not None:
        from kdtree_cli.tui.sources.file_follow import FollowSource

        return FollowSource(follow)
    if replay is not None:
        from kdtree_cli.tui.sources.file_replay import ReplaySource

        return ReplaySource(replay, 1.0 if speed is None else speed)
    if run:
        if not args:
            raise KdtreeError("--run needs the run's arguments after --, e.g. "
                              "kdtree tui --run -- --model refs/demo --prompt 'hello'")
        from kdtree_cli.tui.sources.local_run import LocalRunSource

        return LocalRunSource(args)
    from kdtree_cli.tui.sources.ssh_host import HostSource

    if not host:
        raise KdtreeError("--host needs a host name from the remote inventory")
    return HostSource(host, args)


def require_terminal(stdin: IO | None = None, stdout: IO | None = None) -> None:
    """The monitor paints a screen and reads keys: without a terminal on both ends it would
    write escape codes into a file and wait for a `q` that cannot come."""
    streams = (("output", stdout or sys.stdout), ("input", stdin or sys.stdin))
    missing = [what for what, stream in streams if not _is_terminal(stream)]
    if missing:
        raise KdtreeError(
            f"kdtree tui needs a terminal, but its {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not one (piped or redirected). Run it in a "
            "terminal; to keep a run's events for later, write them with `kdtree run --metrics "
            "FILE` and watch them with `kdtree tui --replay FILE`."
        )


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def run_monitor(
    source: EventSource,
    *,
    interval: float | None = None,
    window: int = 100,
    bucket_s: float | None = None,
    no_color: bool = False,
    save_dir: Path = Path("."),
):
    """Run the app until the user quits; returns its stats model (for a closing line).
    KdtreeError when there is no terminal, and when the app ended on an error (textual has
    printed its traceback then), so the command exits non-zero without a closing line."""
    if (interval is not None and interval <= 0) or window < 1 or (bucket_s is not None and bucket_s <= 0):
        raise KdtreeError("--interval and --bucket must be > 0 and --window >= 1")
    require_terminal()
    try:
        import textual  # noqa: F401
    except ImportError:
        raise KdtreeError("kdtree tui needs textual: pip install -e '.[tui]'") from None
    if no_color:
        os.environ["NO_COLOR"] = "1"  # textual reads it when the app is built
    from kdtree_cli.tui.app import REDRAW_INTERVAL_S, make_app

    app = make_app(source, interval=interval or REDRAW_INTERVAL_S, window=window, bucket_s=bucket_s,
                   save_dir=save_dir)
    app.run()
    if app.crash is not None or app.return_code:
        why = f"{type(app.crash).__name__}: {app.crash}" if app.crash is not None else \
            f"return code {app.return_code}"
        raise KdtreeError(f"the monitor stopped on an internal error ({why}): a bug, please "
                          "report it with the traceback above")
    return app.stats


def closing_line(stats) -> str:
    """What the terminal keeps after the monitor closes."""
    from kdtree_cli.tui.drawing import fnum

    line = (f"kdtree tui: {stats.rounds} rounds, tau {fnum(stats.tau)}, "
            f"{fnum(stats.tps_avg, '.1f')} tok/s (decode avg), {stats.malformed} malformed lines")
    if stats.run_end is not None:
        end = stats.run_end
        line += f"; run_end: {end['tokens']} tokens, {fnum(end['tokens_per_s'], '.1f')} tok/s"
    return line
