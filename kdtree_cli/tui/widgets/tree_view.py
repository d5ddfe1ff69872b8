"""The last round's draft tree with the accepted path highlighted. Depth-first, the
accepted child first, so the path reads straight down the left edge; nodes that do not fit
are counted. Without the optional `tree` field (docs/events.md) it shows the sizes only."""

from __future__ import annotations

import time

from rich.text import Text

from kdtree_cli.tui.drawing import hbar, show_token
from kdtree_cli.tui.stats import RunStats, TreeSnapshot
from kdtree_cli.tui.widgets.panel import StatsPanel

MAX_INDENT = 24  # cells of indentation at most; deeper levels show their depth number
# No panel has room for more lines than this; a bigger tree is drawn from its best nodes
# (the first ones: the builder's order is best first) and its accepted path.
DRAWN_NODES_MAX = 2048


def drawn_nodes(tree: TreeSnapshot) -> list[int]:
    """The nodes drawn, in index order: all of them up to DRAWN_NODES_MAX, else the first
    DRAWN_NODES_MAX plus the accepted path (a tree again: parent[i] < i)."""
    assert tree.parent is not None
    n = len(tree.parent)
    if n <= DRAWN_NODES_MAX:
        return list(range(n))
    return sorted(set(range(DRAWN_NODES_MAX)).union(tree.accepted))


def tree_lines(tree: TreeSnapshot) -> list[tuple[int, int, bool]]:
    """(node, depth, accepted) in display order: depth-first, accepted child first, then
    the others in index (= score) order."""
    assert tree.parent is not None
    children: dict[int, list[int]] = {}
    for i in drawn_nodes(tree)[1:]:
        children.setdefault(tree.parent[i], []).append(i)
    on_path = set(tree.accepted)
    order: list[tuple[int, int, bool]] = []
    stack = [(0, 0)]
    while stack:
        node, depth = stack.pop()
        order.append((node, depth, node in on_path))
        kids = children.get(node, [])
        kids = sorted(kids, key=lambda k: (k not in on_path, k))
        stack.extend((k, depth + 1) for k in reversed(kids))
    return order


class TreePanel(StatsPanel):
    TITLE = "last round's tree"
    # A tree that changes 10x a second cannot be read, and it is the costliest panel to
    # paint: while rounds stream in, show a new tree at most this often.
    MIN_INTERVAL_S = 0.25

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._shown_at = -1e9
        self._catch_up = None

    def show(self, stats: RunStats, force: bool = False) -> None:
        now = time.monotonic()
        wait = self._shown_at + self.MIN_INTERVAL_S - now
        if wait > 0 and not force:
            if self._catch_up is None:  # make sure the newest tree shows once rounds stop
                self._catch_up = self.set_timer(wait, lambda: self.show(self.stats, True))
            return
        if self._catch_up is not None:
            self._catch_up.stop()
            self._catch_up = None
        self._shown_at = now
        super().show(stats)

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        tree = stats.last_tree
        out = Text(no_wrap=True, overflow="crop")
        if tree is None:
            out.append("no rounds yet", style="dim")
            return out
        out.append(f"req {tree.request} round {tree.round}", style="bold")
        budget = "" if tree.budget is None else f" of budget {tree.budget}"
        out.append(f" · n {tree.tree_size}{budget} · depth {tree.tree_depth} · accepted ", style="dim")
        out.append(str(tree.accept_len), style="bold green")
        newest = stats.last_round
        if newest is not None and (newest.get("request"), newest.get("round")) != (
            tree.request, tree.round
        ):
            out.append(f" (newest round {newest.get('round')} has no tree)", style="dim")
        if tree.parent is None:
            self._sizes_only(out, tree, width)
            return out
        lines = tree_lines(tree)
        room = height - 1
        shown = lines if len(lines) <= room else lines[: max(0, room - 1)]
        for node, depth, accepted in shown:
            indent = min(depth * 2, MAX_INDENT)
            out.append("\n" + " " * indent)
            label = show_token(tree.text[node]) if tree.text else f"#{tree.tokens[node]}"
            if node == 0:
                out.append(f"● {label}", style="bold green" if accepted else "")
                out.append("  root (last bonus token)", style="dim")
            elif accepted:
                out.append(f"● {label}", style="bold green")
                out.append(f" d{depth}" if depth * 2 > MAX_INDENT else "", style="dim")
            else:
                out.append(f"○ {label}", style="dim")
        more = len(tree.parent) - len(shown)
        if more:
            out.append(f"\n… {more} more nodes", style="dim")
        return out

    @staticmethod
    def _sizes_only(out: Text, tree: TreeSnapshot, width: int) -> None:
        depth = max(1, tree.tree_depth)
        bar_w = max(4, min(40, width - 24))
        out.append("\naccepted depth ")
        out.append(hbar((tree.accept_len - 1) / depth, bar_w), style="green")
        out.append(f" {tree.accept_len - 1}/{tree.tree_depth}")
        out.append("\n(the events carry no `tree` field)", style="dim")
