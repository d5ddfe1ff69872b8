#!/usr/bin/env python3
"""A/B of bench_moe builds on one GPU: the same routings (kdtree bench moe's, seed 0), each
build run in turn, ROUNDS times, so that drift between runs shows as spread. Prints one line
per (n, build, impl): the median layer / gate-up / down times of its rounds (ms) and their spread.

  scripts/moe_ab.py NAME=PATH/bench_moe [NAME=PATH ...] [--tokens 1 8 64] [--rounds 2]
                    [--impl int4 int4_scan] [--reps 30] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kdtree_cli.bench.moe import MoeShape, routing_tensors  # noqa: E402
from python_engine.kdtr import write_kdtr  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="NAME=path to a bench_moe program")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--impl", nargs="+", default=["int4"], help="bench_moe impl names to report")
    ap.add_argument("--json", type=Path, help="write every record here")
    args = ap.parse_args()
    builds = dict(b.split("=", 1) for b in args.builds)
    with tempfile.TemporaryDirectory() as tmp:
        routing = write_kdtr(Path(tmp) / "routing.kdtr", routing_tensors(MoeShape(), tuple(args.tokens), 4, 0))
        got: dict[tuple[int, str, str], list[dict]] = {}
        for rnd in range(args.rounds):
            for name, prog in builds.items():
                proc = subprocess.run([prog, "--routing", str(routing), "--reps", str(args.reps)],
                                      capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    print(f"{name}: bench_moe failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                    return 1
                for line in proc.stdout.splitlines():
                    if not line.startswith("{"):
                        continue
                    r = json.loads(line)
                    if r.get("kind") == "moe" and r["impl"] in args.impl:
                        got.setdefault((r["tokens"], name, r["impl"]), []).append({**r, "round": rnd, "build": name})
                    elif r.get("kind") == "copy":
                        print(f"round {rnd} {name}: copy {r['gbps']:.0f} GB/s")
    print(f"{'n':>4} {'build':>12} {'impl':>14} {'layer':>9} {'gate_up':>9} {'down':>9}  spread(layer)")
    for (n, name, impl), rs in sorted(got.items()):
        med = {k: statistics.median(r[k] for r in rs) for k in ("ms", "gate_up_ms", "down_ms")}
        spread = max(r["ms"] for r in rs) - min(r["ms"] for r in rs)
        print(f"{n:>4} {name:>12} {impl:>14} {med['ms']:9.4f} {med['gate_up_ms']:9.4f} {med['down_ms']:9.4f}"
              f"  {spread:.4f}")
    if args.json:
        args.json.write_text(json.dumps([r for rs in got.values() for r in rs], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
