"""The `?` screen: the keys, and what each panel's numbers mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]Keys[/b]
[b]p[/b] pause or resume the display (live sources keep reading; a replay pauses) · \
[b]r[/b] reset the counters (run facts and the log stay) · \
[b]s[/b] save a snapshot: an SVG screenshot and a JSON summary of the figures · \
[b]?[/b] this help · [b]q[/b] quit

[b]acceptance length τ[/b]: mean accepted tokens per target forward, counting the bonus \
token (vLLM and SGLang "acceptance length"), overall and over the last rounds; the \
histogram counts rounds by acceptance length.

[b]acceptance rate by depth[/b]: rate = P(accepted depth ≥ d | the tree reached d); \
step = the same given that depth d-1 was accepted; rounds = trees that reached d.

[b]tokens/s[/b]: decode tokens per bucket of event time; min and max skip buckets without \
rounds (prefill); avg = decode tokens / summed round time.

[b]time per round[/b]: mean stage times over the last rounds, in ms and as shares: \
█ draft, ▓ tree build, ▒ verify, ░ commit.

[b]last round's tree[/b] (wide terminals): ● the accepted path, ○ the other drafted \
nodes; needs the optional `tree` field (docs/events.md).

[dim]escape, q or ? closes this screen[/dim]"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("q", "dismiss", "close", show=False),
        Binding("question_mark", "dismiss", "close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP)
