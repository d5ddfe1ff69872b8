"""Where a round's time goes, kernel by kernel: run under Nsight Compute with
`--profile-from-start off`, this warms the native engine up on the demo pair, then profiles
one DDTree request and one AR request (cuProfilerStart/Stop around them), and `summarize`
turns ncu's CSV into a table of total time per kernel.

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --log-file ncu.csv \\
        python3 -m kdtree_cli.bench.kernel_profile --dtype float32
    python3 -m kdtree_cli.bench.kernel_profile --summarize ncu.csv
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import sys
from collections import defaultdict


def profiled_run(dtype: str, tokens: int, budget: int) -> None:
    from python_engine.demo.code_prompts import code_prompts
    from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
    from python_engine.native.engine import NativeEngine, NativeOptions
    from python_engine.native.generate import NativeRunSettings, run_native

    cuda = ctypes.CDLL("libcuda.so.1")  # the driver's profiler switch: ncu listens to it
    prompts = code_prompts(2, 11)
    with NativeEngine(DEFAULT_TARGET, DEFAULT_DRAFTER, NativeOptions(dtype=dtype, max_slots=1, max_tokens=512,
                                                                    max_budget=budget), variant="gpu") as eng:
        for p in prompts:  # warm-up: every round shape seen twice (captured as a graph)
            run_native(eng, [p], NativeRunSettings(max_new_tokens=tokens, budget=budget))
            run_native(eng, [p], NativeRunSettings(max_new_tokens=tokens, ar=True))
        cuda.cuProfilerStart()
        dd = run_native(eng, [prompts[0]], NativeRunSettings(max_new_tokens=tokens, budget=budget))
        ar = run_native(eng, [prompts[0]], NativeRunSettings(max_new_tokens=tokens, ar=True))
        cuda.cuProfilerStop()
    print(f"profiled: DDTree {dd.rounds} rounds, AR {ar.rounds} steps (+ both prefills)")


def summarize(path: str, top: int = 40) -> None:
    total = defaultdict(float)
    count = defaultdict(int)
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:70]
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        total[name] += value * scale
        count[name] += 1
    grand = sum(total.values())
    print(f"{'kernel':72} {'calls':>6} {'total us':>10} {'mean us':>8} {'share':>6}")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name:72} {count[name]:6d} {us:10.1f} {us / count[name]:8.2f} {100 * us / grand:5.1f}%")
    print(f"{'all':72} {sum(count.values()):6d} {grand:10.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--summarize", metavar="NCU_CSV")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize)
    else:
        profiled_run(args.dtype, args.tokens, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
