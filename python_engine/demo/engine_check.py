"""The native engine's smoke check (`kdtree engine-check`): on the demo pair, a few requests
decoded with DDTree and with AR on the GPU engine (float32), every DDTree output equal to its
AR output, plus one round of the part-1 forwards. One line per check and a last line
`smoke: N passed, N failed`; exit status 0 only when all passed. Runs where `kdtree deploy`
tests a box, and under compute-sanitizer (it is small on purpose).

    python -m python_engine.demo.engine_check [--requests 4] [--tokens 32] [--variant gpu|emu]
                                              [--dtype float32|bfloat16] [--target DIR] [--drafter DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from python_engine.demo.code_prompts import code_prompts
from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from python_engine.engine_choice import native_unavailable
from python_engine.errors import KdtreeError
from python_engine.native.engine import NativeEngine, NativeOptions
from python_engine.native.generate import NativeRunSettings, run_native

SMOKE_SEED = 7


def smoke(requests: int, tokens: int, variant: str, dtype: str, budget: int, target: Path = DEFAULT_TARGET,
          drafter: Path = DEFAULT_DRAFTER) -> tuple[int, int]:
    """(passed, failed) checks; a load or engine failure is one failed check, not an exception."""
    why_not = native_unavailable() if variant == "gpu" else None
    if why_not:
        print(f"[FAILED] {why_not}", flush=True)
        return 0, 1
    try:
        return _smoke(requests, tokens, variant, dtype, budget, target, drafter)
    except KdtreeError as exc:
        print(f"[FAILED] {exc}", flush=True)
        return 0, 1


def _smoke(requests: int, tokens: int, variant: str, dtype: str, budget: int, target: Path,
           drafter: Path) -> tuple[int, int]:
    passed = failed = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print(f"[{'ok' if ok else 'FAILED'}] {name}: {detail}", flush=True)

    prompts = code_prompts(requests, SMOKE_SEED)
    t0 = time.perf_counter()
    opts = NativeOptions(dtype=dtype, max_slots=requests, max_tokens=512, max_budget=budget)
    with NativeEngine(target, drafter, opts, variant=variant) as eng:
        check("create", True, f"{time.perf_counter() - t0:.2f} s, {eng.memory()['total'] / 2**20:.0f} MiB")
        logits, hidden = eng.prefill(0, prompts[0], hidden=True)
        check("prefill", bool(np.isfinite(logits).all() and np.isfinite(hidden).all()),
              f"{len(prompts[0])} tokens, logits finite")
        eng.slot_reset(0)
        ar = run_native(eng, prompts, NativeRunSettings(max_new_tokens=tokens, ar=True))
        dd = run_native(eng, prompts, NativeRunSettings(max_new_tokens=tokens, budget=budget))
        same = sum(a.tokens == d.tokens for a, d in zip(ar.results, dd.results))
        check("ddtree == ar", same == len(prompts),
              f"{same}/{len(prompts)} requests identical, tau {dd.tau:.2f}, {dd.rounds} rounds vs {ar.rounds}")
        check("lengths", all(len(r.tokens) == tokens for r in dd.results), f"{tokens} tokens each")
    return passed, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--variant", default="gpu", choices=("gpu", "emu"))
    ap.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="target checkpoint (default: the demo target)")
    ap.add_argument("--drafter", type=Path, default=DEFAULT_DRAFTER,
                    help="its DFlash drafter (default: the demo drafter)")
    args = ap.parse_args(argv)
    passed, failed = smoke(args.requests, args.tokens, args.variant, args.dtype, args.budget, args.target, args.drafter)
    print(f"smoke: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
