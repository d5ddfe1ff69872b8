"""Ingest benchmark (not a test): how many events per second the monitor absorbs while it
keeps redrawing, fed by a source that never waits.

    python -m tools.bench_tui_ingest                 # 8 s in a pseudo-terminal
    python -m tools.bench_tui_ingest --tree --seconds 5 --size 120x40
    python -m tools.bench_tui_ingest --headless      # no terminal output at all

By default the app runs in a pseudo-terminal with its real driver, so every frame is
composed and written as escape codes (the parent process drains them), which is what a
user's terminal costs. The goal is >= 10,000 events/s while redrawing at >= 10 frames/s.
Figures: events/s absorbed by the app (parsed, counted, in the stats) over the measured
window (after a 1 s warm-up), redraws/s (the app's timer pushing figures to the panels),
frames/s (screen updates the compositor painted) and the longest gap between redraws.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time

STAGES = ("draft", "tree_build", "verify", "commit")


def synthetic_lines(n: int, *, tree: bool, seed: int = 0) -> list[str]:
    """n plausible events (a run_start, then rounds; GPU figures every 10th round)."""
    rng = random.Random(seed)
    lines = [json.dumps({
        "event": "run_start", "t": 0.0, "engine": "native", "model": "bench-model",
        "drafter": "bench-drafter", "device": "cuda:0", "host": "bench", "dtype": "bfloat16",
        "block_size": 16, "budget": 32, "temperature": 0.0})]
    t, tokens = 0.0, 0
    for i in range(n - 1):
        depth = rng.randint(3, 12)
        a = rng.randint(1, depth + 1)
        t += 0.02
        tokens += a
        ev = {"event": "round", "t": round(t, 6), "request": 0, "round": i, "accept_len": a,
              "tree_size": 32, "tree_depth": depth,
              "times_us": {s: round(rng.uniform(200, 16000), 1) for s in STAGES}, "tokens": tokens}
        if tree:
            parent = [-1] + [rng.randrange(k) for k in range(1, 33)]
            path = [0]
            ev["tree"] = {"parent": parent, "tokens": [rng.randrange(32000) for _ in parent],
                          "accepted": path}
        if i % 10 == 0:
            ev["gpus"] = [{"id": 0, "util": 80.0, "mem_gb": 60.0, "mem_total_gb": 141.0}]
        lines.append(json.dumps(ev, separators=(",", ":")))
    return lines


def run_app(args, out_path: str | None) -> dict:
    """Run the monitor fed by a flood source for warm-up + args.seconds; return figures."""
    from kdtree_cli.tui.app import MonitorApp
    from kdtree_cli.tui.sources.base import EventSource
    from kdtree_cli.tui.widgets.acceptance import AcceptancePanel

    lines = synthetic_lines(args.pool, tree=args.tree)

    class FloodSource(EventSource):
        kind = "bench"

        def describe(self) -> str:
            return f"bench flood ({'with' if args.tree else 'no'} tree field)"

        def produce(self) -> None:  # chunks of 200 lines, as a file reader hands them on
            while not self.stopping:
                for i in range(0, len(lines), 200):
                    self.emit_many(lines[i:i + 200])
                    if self.stopping:
                        return

    paints = [0]
    base_render = AcceptancePanel.render

    def counting_render(self):  # one panel's repaints = frames that showed new figures
        paints[0] += 1
        return base_render(self)

    AcceptancePanel.render = counting_render

    class BenchApp(MonitorApp):
        # textual reads a relative CSS_PATH next to the subclass's file: keep the app's own
        CSS_PATH = os.path.join(os.path.dirname(sys.modules[MonitorApp.__module__].__file__), "app.tcss")
        redraw_times: list[float] = []
        marks: dict = {}

        def on_mount(self) -> None:
            super().on_mount()
            self.set_timer(1.0, self._mark_start)
            self.set_timer(1.0 + args.seconds, self._mark_end)

        def _counters(self) -> tuple:
            return time.perf_counter(), self.events_absorbed, len(self.redraw_times), paints[0]

        def _mark_start(self) -> None:
            self.marks["start"] = self._counters()

        def _mark_end(self) -> None:
            self.marks["end"] = self._counters()
            self.exit()

        def redraw(self, force: bool = False) -> None:
            self.redraw_times.append(time.perf_counter())
            super().redraw(force)

    app = BenchApp(FloodSource(), interval=args.interval)
    width, height = (int(x) for x in args.size.split("x"))
    if args.headless:
        async def go():
            async with app.run_test(size=(width, height)) as pilot:
                while "end" not in app.marks:
                    await pilot.pause(0.05)
        asyncio.run(go())
    else:
        app.run()
    (t0, e0, r0, p0), (t1, e1, r1, p1) = app.marks["start"], app.marks["end"]
    window = [t for t in app.redraw_times if t0 <= t <= t1]
    gaps = [b - a for a, b in zip(window, window[1:])] or [float("nan")]
    result = {
        "mode": "headless" if args.headless else "pty",
        "size": args.size,
        "tree_field": args.tree,
        "seconds": round(t1 - t0, 3),
        "events_per_s": round((e1 - e0) / (t1 - t0)),
        "redraws_per_s": round((r1 - r0) / (t1 - t0), 1),
        "frames_per_s": round((p1 - p0) / (t1 - t0), 1),
        "max_redraw_gap_ms": round(1000 * max(gaps), 1),
        "events_total": e1,
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(result, f)
    return result


def run_in_pty(args) -> dict:
    """Re-run this module as a child on a pseudo-terminal of the requested size; drain
    its output as a terminal would; read its figures from a temporary file."""
    import fcntl
    import pty
    import struct
    import tempfile
    import termios

    width, height = (int(x) for x in args.size.split("x"))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out_path = tmp.name
    argv = [sys.executable, "-m", "tools.bench_tui_ingest", "--child", out_path,
            "--seconds", str(args.seconds), "--size", args.size, "--interval", str(args.interval),
            "--pool", str(args.pool)] + (["--tree"] if args.tree else [])
    pid, fd = pty.fork()
    if pid == 0:  # the child: the app's terminal is this pty
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
    os.kill(pid, __import__("signal").SIGWINCH)
    written = 0
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        written += len(chunk)
    _, status = os.waitpid(pid, 0)
    try:
        with open(out_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        raise SystemExit(f"the benchmark child failed (status {status}); run with --headless "
                         "to see its error") from None
    finally:
        os.unlink(out_path)
    result["terminal_bytes_per_s"] = round(written / (args.seconds + 1.0))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description="Events/s the kdtree monitor absorbs while redrawing.")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured window (after 1 s warm-up)")
    ap.add_argument("--size", default="160x48", help="terminal WIDTHxHEIGHT")
    ap.add_argument("--interval", type=float, default=0.08, help="redraw interval (s), as the app's default")
    ap.add_argument("--tree", action="store_true", help="rounds carry the optional tree field")
    ap.add_argument("--pool", type=int, default=20000, help="distinct lines, replayed in a loop")
    ap.add_argument("--headless", action="store_true", help="no terminal: compose frames only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_app(args, args.child)
        return
    result = run_app(args, None) if args.headless else run_in_pty(args)
    goal = "meets" if result["events_per_s"] >= 10_000 and result["frames_per_s"] >= 10 else "MISSES"
    print(json.dumps(result))
    print(f"{result['events_per_s']:,} events/s at {result['frames_per_s']} frames/s "
          f"({result['redraws_per_s']} redraws/s, longest gap {result['max_redraw_gap_ms']} ms): "
          f"{goal} the goal of >= 10,000 events/s while painting >= 10 frames/s")


if __name__ == "__main__":
    main()
