#!/usr/bin/env python3
"""The W4A16 timeline (bench_moe built with -DKD_W4_TIMELINE) by each CTA's dispatch rank on its
SM: the SM's gate/up (or down) CTAs ordered by blockIdx, the order the block scheduler gave them
to it, and each rank's exit times. Reads moetl.jsonl lines of kind "timeline" that carry every
CTA ("raw" from bench_moe, or "ctas_compact", the compact form of archived runs).

  scripts/w4_timeline_ranks.py MOETL.jsonl [--form gate_up|down] [--tokens 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def ctas(rec: dict, form: str) -> list[tuple[int, int, float]]:
    """(cta, smid, exit us) of every CTA of one form."""
    part = rec.get(form, {})
    if "raw" in part:  # [cta, smid, expert, entry, expert, ready, first, loop_end, exit]
        return [(r[0], r[1], r[8] / 100) for r in part["raw"]]
    if "ctas_compact" in part:  # [cta, smid, expert, ready, exit]
        return [(r[0], r[1], r[4] / 100) for r in part["ctas_compact"]]
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path)
    ap.add_argument("--form", choices=["gate_up", "down"], default="gate_up")
    ap.add_argument("--tokens", type=int, default=1)
    args = ap.parse_args()
    shown = 0
    for line in args.path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") != "timeline" or rec["tokens"] != args.tokens:
            continue
        by_sm: dict[int, list[tuple[int, float]]] = {}
        for cta, sm, exit_us in ctas(rec, args.form):
            by_sm.setdefault(sm, []).append((cta, exit_us))
        if not by_sm:
            continue
        ranks: dict[int, list[float]] = {}
        for per_sm in by_sm.values():
            for rank, (_, exit_us) in enumerate(sorted(per_sm)):
                ranks.setdefault(rank, []).append(exit_us)
        cells = "; ".join(f"rank {k} ({len(v)} CTAs) {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
                          for k, v in sorted(ranks.items()))
        print(f"{rec['impl']} run {rec['run']}: {args.form} exit us by dispatch rank on the SM (median, min-max): {cells}")
        shown += 1
    if not shown:
        print(f"{args.path}: no timeline record with per-CTA data at n = {args.tokens}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
