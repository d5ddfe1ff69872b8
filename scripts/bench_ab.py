"""A/B table of bench_kernels JSON-lines runs: `python3 scripts/bench_ab.py base=A1.json,A2.json new=B1.json,B2.json`.

Each side's runs are separate processes of one binary over the same --cases file (the
gpu_engine_run.sh attnab step alternates them). Prints, per case, each side's best median
over its runs and the ratio base / new (> 1: new is faster), with the plan fields that
explain a difference (splits, split_keys, config)."""

import json
import sys


def load(paths: list[str]) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    row = json.loads(line)
                    rows.setdefault(row["case"], []).append(row)
    return rows


def main(argv: list[str]) -> int:
    sides = dict(arg.split("=", 1) for arg in argv)
    if set(sides) != {"base", "new"}:
        print(__doc__, file=sys.stderr)
        return 2
    base, new = load(sides["base"].split(",")), load(sides["new"].split(","))
    print(f"{'case':64} {'base us':>9} {'new us':>9} {'base/new':>8}  plan (new)")
    for case, rows in new.items():
        n_us = 1e3 * min(r["ms"] for r in rows)
        b_rows = base.get(case, [])
        b_us = 1e3 * min(r["ms"] for r in b_rows) if b_rows else float("nan")
        plan = " ".join(f"{k}={rows[0][k]}" for k in ("splits", "split_keys", "config") if k in rows[0])
        ok = "" if all(r.get("ok", True) for r in rows + b_rows) else "  NOT OK"
        print(f"{case:64} {b_us:9.1f} {n_us:9.1f} {b_us / n_us:8.3f}  {plan}{ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
