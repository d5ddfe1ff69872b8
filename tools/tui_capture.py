"""Watch a run with `kdtree tui` where no terminal is at hand (a CI box, the GPU machine),
and keep what the screen showed: the monitor runs headless at a fixed size, fed by the same
source `kdtree tui` would build, and the `s` key saves its screenshot (SVG) and summary
(JSON) once mid-run and once after the run ended.

    python -m tools.tui_capture --host ct200 --out DIR [--size 120x40] [--at-rounds 10] \\
        -- --model refs/models/demo-target --drafter refs/models/demo-drafter --prompt 'def f('

Same sources as `kdtree tui`: --host HOST (a run on a deployed host, over SSH), --run (a
local run), --replay FILE. Exit status 0 when the source ended normally (the run's
run_end arrived), 1 otherwise; the last line says what the monitor saw.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

FINAL = ("ended", "dropped", "failed")


async def _watch(app, size: tuple[int, int], at_rounds: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s

    def state() -> str:
        return app.source_state.value if app.source_state else ""

    async with app.run_test(size=size) as pilot:
        while app.stats.rounds < at_rounds and state() not in FINAL and time.monotonic() < deadline:
            await pilot.pause(0.05)
        app.redraw(force=True)
        await pilot.pause(0.2)
        await pilot.press("s")  # mid-run (or as far as it got)
        while state() not in FINAL and time.monotonic() < deadline:
            await pilot.pause(0.1)
        app.redraw(force=True)
        await pilot.pause(0.3)
        await pilot.press("s")  # the end
        await pilot.pause(0.2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="python -m tools.tui_capture", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", help="watch a run on this deployed host")
    ap.add_argument("--run", action="store_true", help="watch a local run")
    ap.add_argument("--replay", type=Path, help="replay a metrics file")
    ap.add_argument("--out", type=Path, required=True, help="where the SVG/JSON pairs go")
    ap.add_argument("--size", default="120x40", help="terminal size, COLSxROWS")
    ap.add_argument("--at-rounds", type=int, default=10, help="take the mid-run picture after this many rounds")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = ap.parse_args(argv)

    from kdtree_cli.tui.app import make_app
    from kdtree_cli.tui.launch import build_source, closing_line

    source = build_source(host=args.host, run=args.run, replay=args.replay,
                          speed=0.0 if args.replay else None, args=run_args)
    app = make_app(source, save_dir=args.out)
    cols, rows = (int(x) for x in args.size.split("x"))
    asyncio.run(_watch(app, (cols, rows), args.at_rounds, args.timeout))
    state = app.source_state.value if app.source_state else "none"
    print(f"{closing_line(app.stats)}; source {state}: {app.source_detail}")
    print(f"screenshots in {args.out}: " + ", ".join(sorted(p.name for p in args.out.glob("*.svg"))))
    return 0 if state == "ended" and app.stats.run_end is not None else 1


if __name__ == "__main__":
    sys.exit(main())
