"""`kdtree bench engine --model DIR [--load-format dummy] [--world-size N --rank R]`: what one GPU
does each round for a model it holds whole or, with --world-size, one rank's share of (its
collectives do nothing, reported as not run). For each batch x context x budget (0 = AR): the
engine's memory report, and the median round time and stage times (draft, tree_build, verify,
commit, host) over timed rounds after warm-up. A case that does not fit the memory limit is
recorded with the engine's refusal. Writes rank_round.json and rank_round.md.

Dummy weights make the timing independent of a checkpoint, but the trees they accept mean
nothing: this measures round cost, not acceptance (the plan's accept length is an input there).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kdtree_cli.bench.provenance import run_record
from python_engine.errors import KdtreeError

STAGES = ("draft", "tree_build", "verify", "commit", "host")
WARMUP_ROUNDS = 2  # the first rounds of a shape capture its CUDA graph
MAX_ROUND_TOKENS = 33  # a round emits at most the drafter's block (<= 33 tokens): the slot's headroom per round


def case_tokens(context: int, rounds: int) -> int:
    """A slot's max_tokens for a case: the prompt plus every round's largest output, with the
    warm-up and the admitting step."""
    return context + (rounds + WARMUP_ROUNDS + 1) * MAX_ROUND_TOKENS


@dataclass
class RankRoundBench:
    model: Path
    drafter: Path | None
    load_format: str = "dummy"
    world_size: int = 1
    rank: int = 0
    memory_limit_gib: float | None = None
    dtype: str = "bfloat16"
    contexts: tuple[int, ...] = (1024, 32768, 131072)
    batches: tuple[int, ...] = (1, 8)
    budgets: tuple[int, ...] = (0, 4, 8, 16, 32, 64)
    rounds: int = 8  # timed rounds per case
    seed: int = 0
    variant: str = "gpu"  # "emu": the CPU emulator (checks the bench; its times mean nothing)
    out_dir: Path | None = None
    log: list[str] = field(default_factory=list)

    def say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)


def _time_case(eng, prompts: list[list[int]], budget: int, rounds: int) -> dict:
    """Submit the prompts (prefilled at admission), step until `rounds` rounds after warm-up,
    cancel what is left; per-round medians of the step reports."""
    ids = [eng.submit(p, eng.options.max_tokens - len(p), budget=budget, ar=budget == 0) for p in prompts]
    per_round: list[dict] = []
    collectives, not_run = 0, False
    steps = 0
    while len(per_round) < rounds:
        rep = eng.step()
        steps += 1
        if rep.rounds == 0 and rep.running == 0 and rep.waiting == 0:
            break
        if rep.admitted or steps <= WARMUP_ROUNDS:
            continue  # a step that prefilled, or a shape's first rounds (graph capture)
        per_round.append({k: rep.stage_us[k] for k in STAGES} | {"batch": rep.batch})
        collectives = rep.collectives
        not_run = not_run or rep.collective_us is None
    for rid in ids:
        info = eng.request(rid)
        if info.state in ("waiting", "running"):
            eng.cancel(rid)
        eng.release(rid)
    if not per_round:
        raise KdtreeError(f"budget {budget}: no round ran after the warm-up")
    stage_us = {k: statistics.median(r[k] for r in per_round) for k in STAGES}
    return {"rounds_timed": len(per_round), "round_us": statistics.median(sum(r[k] for k in STAGES) for r in per_round),
            "stage_us": stage_us, "collectives_per_round": collectives,
            "collectives": "not run" if not_run else ("none" if collectives == 0 else "run")}


def run_rank_round_bench(b: RankRoundBench) -> dict:
    from python_engine.model.config import load_target_config
    from python_engine.native.engine import NativeEngine, NativeOptions
    from python_engine.native.library import NativeError

    cfg = load_target_config(b.model)
    rng = np.random.default_rng(b.seed)
    result: dict = {"run": run_record(), "model": str(b.model), "drafter": str(b.drafter) if b.drafter else None,
                    "load_format": b.load_format, "world_size": b.world_size, "rank": b.rank,
                    "memory_limit_gib": b.memory_limit_gib, "dtype": b.dtype, "variant": b.variant, "cases": []}
    if b.load_format == "dummy":
        result["note"] = "dummy weights: round cost only; accepted lengths and tokens mean nothing"
    need_drafter = any(budget > 0 for budget in b.budgets)
    if need_drafter and b.drafter is None:
        raise KdtreeError("DDTree budgets need --drafter DIR (or give --budgets 0 for AR only)")
    for batch in b.batches:
        for context in b.contexts:
            opts = NativeOptions(dtype=b.dtype, max_slots=batch, max_tokens=case_tokens(context, b.rounds),
                                 max_budget=max(b.budgets), load_format=b.load_format, dummy_seed=b.seed,
                                 world_size=b.world_size, rank=b.rank, comm="none",
                                 memory_limit=int(b.memory_limit_gib * 2**30) if b.memory_limit_gib else 0)
            case: dict = {"batch": batch, "context": context}
            try:
                eng = NativeEngine(b.model, b.drafter if need_drafter else None, opts, variant=b.variant)
            except NativeError as exc:
                case["refused"] = str(exc)
                b.say(f"batch {batch} context {context}: refused: {exc}")
                result["cases"].append(case)
                continue
            with eng:
                case["memory"] = eng.memory()
                case["budgets"] = {}
                prompts = [rng.integers(0, cfg.vocab_size, context).tolist() for _ in range(batch)]
                for budget in b.budgets:
                    r = _time_case(eng, prompts, budget, b.rounds)
                    case["budgets"][str(budget)] = r
                    s = r["stage_us"]
                    b.say(f"batch {batch} context {context} {'AR' if budget == 0 else f'budget {budget}'}: round "
                          f"{r['round_us'] / 1000:.3f} ms (draft {s['draft'] / 1000:.3f}, tree {s['tree_build'] / 1000:.3f}, "
                          f"verify {s['verify'] / 1000:.3f}, commit {s['commit'] / 1000:.3f}); collectives {r['collectives']}")
            result["cases"].append(case)
    if b.out_dir is not None:
        b.out_dir.mkdir(parents=True, exist_ok=True)
        (b.out_dir / "rank_round.json").write_text(json.dumps(result, indent=1) + "\n")
        (b.out_dir / "rank_round.md").write_text(markdown(result))
    return result


def markdown(r: dict) -> str:
    run = r["run"]
    share = (f"rank {r['rank']}'s share of {r['world_size']} alone (collectives not run)" if r["world_size"] > 1
             else "the whole model")
    lines = [f"# One GPU's round: {Path(r['model']).name}, {share}", "",
             f"`{run['command']}` at {run['commit']} on {run['device']}, {run['date']}; {r['dtype']}, "
             f"{r['load_format']} weights" + (f", limit {r['memory_limit_gib']:g} GiB" if r["memory_limit_gib"] else "") +
             ("" if r["variant"] == "gpu" else " (CPU emulator: times mean nothing)") + ".", ""]
    if r.get("note"):
        lines += [f"Note: {r['note']}.", ""]
    lines += ["| batch | context | budget | round ms | draft | tree | verify | commit | host |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in r["cases"]:
        if "refused" in c:
            lines.append(f"| {c['batch']} | {c['context']} | - | does not fit: {c['refused'][:160]} | | | | | |")
            continue
        for budget, x in c["budgets"].items():
            s = x["stage_us"]
            lines.append(f"| {c['batch']} | {c['context']} | {'AR' if budget == '0' else budget} | "
                         f"{x['round_us'] / 1000:.3f} | " + " | ".join(f"{s[k] / 1000:.3f}" for k in STAGES) + " |")
    lines += ["", "| batch | context | weights GiB (target, drafter) | caches GiB | workspace GiB | limit GiB |",
              "|---:|---:|---:|---:|---:|---:|"]
    for c in r["cases"]:
        if "memory" in c:
            m = {k: v / 2**30 for k, v in c["memory"].items()}
            lines.append(f"| {c['batch']} | {c['context']} | {m['weights']:.2f} ({m['target_weights']:.2f}, "
                         f"{m['drafter_weights']:.2f}) | {m['target_cache'] + m['drafter_cache']:.2f} | "
                         f"{m['workspace']:.2f} | {m['limit']:.2f} |")
    return "\n".join(lines) + "\n"
