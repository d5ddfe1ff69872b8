"""`kdtree bench engine`: decoding throughput on the demo pair, every engine and mode in one
run on one GPU: the torch reference (AR, DDTree) and the native engine (AR; DDTree at each
budget, one request at a time; DDTree with 32 requests at once), the native round's stage
times and the share of everything but the two forwards, and whether every DDTree output
equals its AR output. Writes engine.json and engine.md (results/<device>/engine/ by default).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from python_engine.decode.result import tau_of
from python_engine.demo.code_prompts import code_prompts
from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from python_engine.engine_choice import native_unavailable
from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

from kdtree_cli.bench.gpu import git_commit
from kdtree_cli.bench.provenance import run_record

BUDGETS = (8, 16, 32, 64, 128)
TORCH_BUDGET = 32  # the torch reference's DDTree at the demo's default budget
BATCH = 32
PROMPT_SEED = 20261130


@dataclass
class EngineBench:
    prompts: int = 8
    max_tokens: int = 128
    dtype: str = "float32"
    batch: int = BATCH
    budgets: tuple[int, ...] = BUDGETS
    out_dir: Path | None = None
    log: list[str] = field(default_factory=list)

    def say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)


def _torch_runs(b: EngineBench, prompts) -> dict:
    import torch

    from python_engine.decode.runner import RunSettings, run_requests
    from python_engine.events import EventWriter
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target, parse_dtype

    target = load_target(DEFAULT_TARGET, "cuda", parse_dtype(b.dtype))
    drafter = load_drafter(DEFAULT_DRAFTER, target)
    out = {}
    for mode, ar in (("torch_ar", True), ("torch_ddtree", False)):
        settings = RunSettings(max_new_tokens=b.max_tokens, budget=TORCH_BUDGET, ar=ar)
        run_requests(target, None if ar else drafter, prompts[:1], RunSettings(max_new_tokens=8, budget=TORCH_BUDGET,
                                                                               ar=ar), EventWriter(None))  # warm-up
        torch.cuda.synchronize()
        gens, summary = run_requests(target, None if ar else drafter, prompts, settings, EventWriter(None))
        out[mode] = {"tokens_per_s": summary.tokens_per_s, "tau": summary.tau, "tokens": [g.tokens for g in gens]}
        b.say(f"{mode}: {summary.tokens_per_s:.1f} tokens/s, tau {summary.tau:.2f}")
    return out


def _native_runs(b: EngineBench, prompts) -> dict:
    from python_engine.native.engine import NativeEngine, NativeOptions
    from python_engine.native.generate import NativeRunSettings, run_native

    opts = NativeOptions(dtype=b.dtype, max_slots=b.batch, max_tokens=1024, max_budget=max(b.budgets))
    out: dict = {}
    with NativeEngine(DEFAULT_TARGET, DEFAULT_DRAFTER, opts, variant="gpu") as eng:
        def one_at_a_time(settings):
            run_native(eng, prompts[:2], settings)  # warm-up: the round shapes get captured
            toks, decode_s, decode_tokens, rounds, accepted, graphs = [], 0.0, 0, 0, 0, 0
            stage = {}
            for p in prompts:
                s = run_native(eng, [p], settings)
                graphs += s.graph_steps
                r = s.results[0]
                toks.append(r.tokens)
                decode_s += r.decode_s
                decode_tokens += r.decode_tokens
                rounds += r.rounds
                accepted += r.accepted
                for k, v in s.stage_us.items():
                    stage[k] = stage.get(k, 0.0) + v
            total = sum(stage.values())
            return {"tokens_per_s": decode_tokens / decode_s if decode_s else 0.0,
                    "tau": tau_of(accepted, rounds), "rounds": rounds, "tokens": toks,
                    "graph_share": graphs / max(rounds, 1),
                    "stage_us_per_round": {k: v / max(rounds, 1) for k, v in stage.items()},
                    "machinery_share": (total - stage.get("draft", 0) - stage.get("verify", 0)) / total if total else 0}

        out["native_ar"] = one_at_a_time(NativeRunSettings(max_new_tokens=b.max_tokens, ar=True))
        b.say(f"native_ar: {out['native_ar']['tokens_per_s']:.1f} tokens/s")
        out["native_ddtree_budgets"] = {}
        for budget in b.budgets:
            r = one_at_a_time(NativeRunSettings(max_new_tokens=b.max_tokens, budget=budget))
            out["native_ddtree_budgets"][budget] = r
            b.say(f"native_ddtree budget {budget}: {r['tokens_per_s']:.1f} tokens/s, tau {r['tau']:.2f}, "
                  f"machinery {100 * r['machinery_share']:.1f}%")
        best = max(out["native_ddtree_budgets"], key=lambda k: out["native_ddtree_budgets"][k]["tokens_per_s"])
        out["best_budget"] = best
        out["native_ddtree"] = out["native_ddtree_budgets"][best]
        batch_prompts = (prompts * (b.batch // len(prompts) + 1))[: b.batch]
        for mode, settings in (("native_ddtree_batch", NativeRunSettings(max_new_tokens=b.max_tokens, budget=best)),
                               ("native_ar_batch", NativeRunSettings(max_new_tokens=b.max_tokens, ar=True))):
            run_native(eng, batch_prompts, settings)  # warm-up at this batch size
            s = run_native(eng, batch_prompts, settings)
            out[mode] = {"tokens_per_s": s.tokens_per_s, "tau": s.tau, "rounds": s.rounds,
                         "tokens": [r.tokens for r in s.results], "wall_s": s.wall_s}
            b.say(f"{mode} ({b.batch} requests): {s.tokens_per_s:.1f} tokens/s aggregate, tau {s.tau:.2f}")
    return out


def run_engine_bench(b: EngineBench) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise KdtreeError("kdtree bench engine needs a CUDA GPU (torch sees none here)")
    why_not = native_unavailable()
    if why_not:  # before the torch runs: the bench is the two engines side by side
        raise KdtreeError(f"kdtree bench engine times the native engine too: {why_not}")
    device = torch.cuda.get_device_name(0)
    prompts = code_prompts(b.prompts, PROMPT_SEED)
    t0 = time.time()
    torch_res = _torch_runs(b, prompts)
    native = _native_runs(b, prompts)
    batch_prompts = (prompts * (b.batch // len(prompts) + 1))[: b.batch]
    alone_of = {i: native["native_ddtree"]["tokens"][i % len(prompts)] for i in range(b.batch)}
    identical = {
        "native_ddtree_vs_native_ar": native["native_ddtree"]["tokens"] == native["native_ar"]["tokens"],
        "native_ar_vs_torch_ar": native["native_ar"]["tokens"] == torch_res["torch_ar"]["tokens"],
        "torch_ddtree_vs_torch_ar": torch_res["torch_ddtree"]["tokens"] == torch_res["torch_ar"]["tokens"],
        "native_batch_vs_alone": all(native["native_ddtree_batch"]["tokens"][i] == alone_of[i] for i in range(b.batch)),
        "every_budget_vs_native_ar": all(r["tokens"] == native["native_ar"]["tokens"]
                                         for r in native["native_ddtree_budgets"].values()),
    }
    tps = {"native_ddtree": native["native_ddtree"]["tokens_per_s"], "native_ar": native["native_ar"]["tokens_per_s"],
           "torch_ddtree": torch_res["torch_ddtree"]["tokens_per_s"], "torch_ar": torch_res["torch_ar"]["tokens_per_s"],
           f"native_ddtree_batch{b.batch}": native["native_ddtree_batch"]["tokens_per_s"],
           f"native_ar_batch{b.batch}": native["native_ar_batch"]["tokens_per_s"]}
    result = {
        "run": run_record(), "device": device, "host": socket.gethostname(), "commit": git_commit(PROJECT_ROOT),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dtype": b.dtype,
        "pair": "refs/models/demo-target + demo-drafter", "prompts": len(prompts), "max_tokens": b.max_tokens,
        "tokens_per_s": tps, "best_budget": native["best_budget"],
        "speedup": {"native_ddtree_over_torch_ddtree": tps["native_ddtree"] / tps["torch_ddtree"],
                    "native_ddtree_over_native_ar": tps["native_ddtree"] / tps["native_ar"]},
        "tau": {"native_ddtree": native["native_ddtree"]["tau"], "torch_ddtree": torch_res["torch_ddtree"]["tau"],
                "native_ddtree_batch": native["native_ddtree_batch"]["tau"]},
        "machinery_share": native["native_ddtree"]["machinery_share"],
        "graph_share": {"native_ddtree": native["native_ddtree"]["graph_share"],
                        "native_ar": native["native_ar"]["graph_share"]},
        "stage_us_per_round": native["native_ddtree"]["stage_us_per_round"],
        "budgets": {str(k): {"tokens_per_s": v["tokens_per_s"], "tau": v["tau"], "machinery_share": v["machinery_share"]}
                    for k, v in native["native_ddtree_budgets"].items()},
        "identical_to_ar": identical,
        "seconds": time.time() - t0,
    }
    if b.out_dir:
        b.out_dir.mkdir(parents=True, exist_ok=True)
        (b.out_dir / "engine.json").write_text(json.dumps(result, indent=2) + "\n")
        (b.out_dir / "engine.md").write_text(markdown(result))
    return result


def markdown(r: dict) -> str:
    t = r["tokens_per_s"]
    lines = [f"# Engine throughput on the demo pair ({r['device']}, {r['dtype']})", "",
             f"commit {r['commit']}, {r['date']}, {r['prompts']} prompts x {r['max_tokens']} tokens", "",
             "| engine / mode | tokens/s | tau |", "|---|---|---|"]
    for k in t:
        tau = r["tau"].get(k.replace("_batch32", "_batch"), "")
        lines.append(f"| {k} | {t[k]:.1f} | {tau if tau == '' else f'{tau:.2f}'} |")
    s = r["speedup"]
    lines += ["", f"native DDTree / torch DDTree: {s['native_ddtree_over_torch_ddtree']:.1f}x; "
                  f"native DDTree / native AR: {s['native_ddtree_over_native_ar']:.2f}x (best budget {r['best_budget']})",
              f"machinery share of a round (all but the two forwards): {100 * r['machinery_share']:.1f}%", "",
              "| stage | us per round |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in r["stage_us_per_round"].items()]
    lines += ["", "| check | identical |", "|---|---|"] + [f"| {k} | {v} |" for k, v in r["identical_to_ar"].items()]
    return "\n".join(lines) + "\n"
