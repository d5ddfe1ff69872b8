"""The `s` key's files: an SVG screenshot and a JSON summary with the same stem,
kdtree-tui-YYYYmmdd-HHMMSS[-N].{svg,json}, never overwriting an earlier pair."""

from __future__ import annotations

import json
import time
from pathlib import Path

from python_engine.errors import KdtreeError


def save_snapshot(svg: str, summary: dict, directory: Path, now: float) -> tuple[Path, Path]:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KdtreeError(f"cannot create {directory} for the snapshot: {exc}") from None
    stem = "kdtree-tui-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    n = 1
    name = stem
    while (directory / f"{name}.svg").exists() or (directory / f"{name}.json").exists():
        n += 1
        name = f"{stem}-{n}"
    svg_path, json_path = directory / f"{name}.svg", directory / f"{name}.json"
    summary = {"saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)), **summary}
    try:
        svg_path.write_text(svg, encoding="utf-8")
        json_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise KdtreeError(f"cannot write the snapshot in {directory}: {exc.strerror or exc}") from None
    return svg_path, json_path
