"""The monitor app and its factory. Sources post messages; the app feeds them to the stats
model as they come and redraws the panels on its own timer (`interval`), so the redraw rate
stays fixed however fast events arrive."""

from __future__ import annotations

import copy
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from kdtree_cli.tui.messages import SourceBatch, SourceNote, SourceRestart, SourceState, SourceStatus
from kdtree_cli.tui.screens.help import HelpScreen
from kdtree_cli.tui.snapshot import save_snapshot
from kdtree_cli.tui.sources.base import EventSource
from kdtree_cli.tui.stats import RunStats
from kdtree_cli.tui.widgets.acceptance import AcceptancePanel
from kdtree_cli.tui.widgets.depth_rates import DepthRatesPanel
from kdtree_cli.tui.widgets.event_log import EventLogPanel
from kdtree_cli.tui.widgets.gpus import GpuPanel
from kdtree_cli.tui.widgets.panel import StatsPanel
from kdtree_cli.tui.widgets.run_facts import RunFactsPanel
from kdtree_cli.tui.widgets.run_summary import RunSummaryPanel
from kdtree_cli.tui.widgets.stage_times import StageTimesPanel
from kdtree_cli.tui.widgets.status_bar import StatusBar
from kdtree_cli.tui.widgets.throughput import ThroughputPanel
from kdtree_cli.tui.widgets.tree_view import TreePanel
from python_engine.errors import KdtreeError

# 12.5 redraws/s nominal, so that a loaded machine still paints >= 10 frames/s.
REDRAW_INTERVAL_S = 0.08

# Under a flood, ingesting may use this share of each redraw interval; then the source
# waits for the next painted frame (it keeps the display at its rate; ~3x the 10k events/s
# goal is left on a loaded 2-core box; see tools/bench_tui_ingest.py).
INGEST_SHARE = 0.4

# state changes worth a log line (streaming <-> waiting flips of a followed file are not)
LOGGED_STATES = {
    SourceState.STARTING: "info",
    SourceState.RECONNECTING: "warning",
    SourceState.ENDED: "info",
    SourceState.DROPPED: "error",
    SourceState.FAILED: "error",
}


class MonitorApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "kdtree tui"
    ENABLE_COMMAND_PALETTE = False  # five keys are the whole interface
    # the screen gets -narrow/-wide and -short/-tall; app.tcss lays out the compact view
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    BINDINGS = [
        Binding("p", "toggle_pause", "pause"),
        Binding("r", "reset", "reset"),
        Binding("s", "save", "snapshot"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        source: EventSource | None = None,
        *,
        interval: float = REDRAW_INTERVAL_S,
        window: int = 100,
        bucket_s: float | None = None,
        save_dir: str | Path = ".",
        clock=time.time,
    ) -> None:
        super().__init__()
        self.source = source
        self.interval = interval
        self.stats = RunStats(window=window, bucket_s=bucket_s)
        self.save_dir = Path(save_dir)
        self.clock = clock  # wall clock, only for snapshot file names (pinned in tests)
        self.paused = False
        self.source_state: SourceState | None = None
        self.source_detail = ""
        self.events_absorbed = 0  # lines taken from sources (the benchmark reads this)
        self.redraws = 0  # figures pushed to the panels
        self.frames = 0  # screen refreshes that followed a redraw
        self._next_redraw = 0.0
        self._ingest_s = 0.0  # time spent ingesting since the last painted frame
        self._last_frame = time.monotonic()
        self._dirty = True
        self.crash: BaseException | None = None  # what ended the app, if anything did

    def _handle_exception(self, error: Exception) -> None:
        # textual's hook for an unhandled exception (it then exits with return code 1 and
        # prints the traceback): keep the error, so the command can say what ended it
        if self.crash is None:
            self.crash = error
        super()._handle_exception(error)

    @property
    def source_label(self) -> str:
        return self.source.describe() if self.source else "no source"

    # ----------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield RunFactsPanel(id="facts", source=self.source_label)
        with Horizontal(id="main"):
            with Vertical(id="left"):
                with Horizontal(id="row1"):
                    yield AcceptancePanel(id="acceptance")
                    yield DepthRatesPanel(id="depths")
                with Horizontal(id="row2"):
                    yield ThroughputPanel(id="throughput")
                    yield StageTimesPanel(id="stages")
                yield RunSummaryPanel(id="summary")
                yield EventLogPanel(id="log")
            with Vertical(id="right"):
                yield TreePanel(id="tree")
                yield GpuPanel(id="gpus")
        yield StatusBar(id="status", source=self.source_label)
        yield Footer()

    def on_mount(self) -> None:
        # the main screen's widgets, held so redraws work while help is on top
        self._status = self.query_one(StatusBar)
        self._panels = list(self.query(StatsPanel))
        self._log = self.query_one(EventLogPanel)
        self._summary = self.query_one(RunSummaryPanel)
        self._gpus = self.query_one(GpuPanel)
        self.set_interval(self.interval, self._tick)
        self.redraw()
        if self.source is not None:
            self.source.start(self.post_message)

    def on_unmount(self) -> None:
        if self.source is not None:
            self.source.stop()

    # ----------------------------------------------------------------------------- messages
    def on_source_batch(self, message: SourceBatch) -> None:
        began = time.monotonic()
        self.stats.ingest_lines(message.lines, message.first_lineno)
        self.events_absorbed += len(message.lines)
        self._dirty = True
        now = time.monotonic()
        self._ingest_s += now - began
        # Under a flood, timer events queue behind batches: redraw from here when one is
        # due. And once ingesting has used its share of the frame, or a frame is overdue,
        # hold the source's credit until the screen has been painted: the source waits,
        # the display does not (a source has at most `in_flight` batches out).
        if now >= self._next_redraw:
            self.redraw()
        if self._ingest_s > INGEST_SHARE * self.interval or now - self._last_frame > self.interval:
            self.call_after_refresh(message.source.ack)
        else:
            message.source.ack()

    def on_source_status(self, message: SourceStatus) -> None:
        previous = self.source_state
        self.source_state, self.source_detail = message.state, message.detail
        level = LOGGED_STATES.get(message.state)
        if message.state == SourceState.STREAMING and previous == SourceState.RECONNECTING:
            level = "info"
        if message.state == SourceState.WAITING and message.detail.startswith("waiting for"):
            level = "info"
        if level:
            self.stats.add_log(level, f"source {message.state.value}: {message.detail}")
        self._dirty = True
        if message.state in (SourceState.ENDED, SourceState.DROPPED, SourceState.FAILED):
            self.redraw(force=True)  # the last figures, every panel, now

    def on_source_restart(self, message: SourceRestart) -> None:
        self.stats.new_stream(message.detail)
        self._dirty = True

    def on_source_note(self, message: SourceNote) -> None:
        self.stats.add_log(message.level, message.text)
        self._dirty = True

    def ingest_lines(self, lines: list[str], first_lineno: int = 1) -> None:
        """Feed raw lines directly, as a SourceBatch does (tests use it to load a file
        without a source thread)."""
        self.stats.ingest_lines(lines, first_lineno)
        self.events_absorbed += len(lines)
        self._dirty = True

    # ----------------------------------------------------------------------------- drawing
    def _tick(self) -> None:
        if self._dirty:
            self.redraw()

    def redraw(self, force: bool = False) -> None:
        """Push the figures to every panel; while paused the panels keep the frozen copy
        taken at the pause and only the status bar follows the live counts. `force`
        also redraws the panels that limit their own rate (the tree)."""
        if not self._status.is_mounted:  # shutting down
            return
        live = self.stats
        self._status.show(live, self.source_state, self.source_detail, self.paused)
        if self.paused:
            return
        self._dirty = False
        self.redraws += 1
        # the next one is due a whole interval after this one was (not after now), so a late
        # redraw does not push every later one back and the rate stays 1 / interval
        now = time.monotonic()
        self._next_redraw = max(self._next_redraw + self.interval, now + 0.5 * self.interval)
        self._show(live, force)
        self.call_after_refresh(self._frame_painted)

    def _frame_painted(self) -> None:
        self.frames += 1
        self._last_frame = time.monotonic()
        self._ingest_s = 0.0

    def _show(self, stats: RunStats, force: bool = False) -> None:
        for panel in self._panels:
            panel.show(stats, force)
        self._log.show(stats)
        self._summary.display = stats.ended
        self._gpus.display = bool(stats.gpus)
        if stats.gpus:
            self._gpus.styles.height = min(len(stats.gpus), 8) + 2

    # ----------------------------------------------------------------------------- keys
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:  # the panels draw from a copy, so nothing moves until resumed
            self._show(copy.deepcopy(self.stats), force=True)
        if self.source is not None:
            self.source.set_paused(self.paused)
        self.stats.add_log("info", "display paused" if self.paused else "display resumed")
        self._dirty = True
        self.redraw()

    def action_reset(self) -> None:
        self.stats.reset()
        self.stats.add_log("info", "counters reset")
        self._dirty = True
        self.redraw(force=True)

    def action_save(self) -> None:
        summary = {
            "source": self.source_label,
            "source_state": self.source_state.value if self.source_state else None,
            **self.stats.summary(),
        }
        try:
            svg_path, json_path = save_snapshot(
                self.export_screenshot(title=f"kdtree tui · {self.source_label}"),
                summary, self.save_dir, self.clock(),
            )
        except KdtreeError as exc:
            self.stats.add_log("error", f"snapshot not saved: {exc}")
            self._dirty = True
            self.notify(str(exc), title="snapshot not saved", severity="error", markup=False)
            return
        self.stats.add_log("info", f"saved {svg_path} and {json_path.name}")
        self._dirty = True
        self.notify(f"saved {svg_path.name} and {json_path.name}", title="snapshot")

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


def make_app(source: EventSource | None = None, **options) -> MonitorApp:
    """The app factory (tests and the command build the app the same way)."""
    return MonitorApp(source, **options)
