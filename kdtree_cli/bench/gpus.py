"""`kdtree bench gpus`: the native engine whole on one GPU and split over N GPUs (NCCL, one
process per GPU), in one run, on two models:
  - the demo pair;
  - a random Kimi K2-shaped slice (real K2 widths: hidden 7168, 64 heads, MLA 1536/512/128/64,
    vocab 163840; 3 layers, the MoE layers with 32 experts, so N GPUs hold 32/N each) and a
    random DFlash drafter for it, both written by this command.
For each: DDTree in float32 on 1 and N GPUs, token for token equal (and every rank agreeing);
then tokens/s and the round's stage times, with the collectives' time and share, in float32
and bf16. Every configuration runs in fresh processes (launch_ranks), a warm-up pass first.
Writes gpus.json and gpus.md.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from python_engine.errors import KdtreeError

STAGES = ("draft", "tree_build", "verify", "commit", "host")
PROMPT_SEED = 20261130


@dataclass
class GpusBench:
    gpus: int = 2
    prompts: int = 8
    max_tokens: int = 64
    budget: int = 32
    models: tuple[str, ...] = ("demo", "kimi")
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    scratch: Path = Path("/tmp/kdtree-gpus-bench")
    out_dir: Path | None = None
    log: list[str] = field(default_factory=list)

    def say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)


def _decode_rank(rank, job: dict) -> dict:
    """One rank (or the whole model): load, a warm-up pass, then the timed pass."""
    from python_engine.native.engine import NativeEngine, NativeOptions
    from python_engine.native.generate import NativeRunSettings, run_native

    split = rank.world_size > 1
    opts = NativeOptions(dtype=job["dtype"], device=rank.device, max_slots=len(job["prompts"]),
                         max_tokens=max(map(len, job["prompts"])) + job["max_tokens"], max_budget=job["budget"],
                         world_size=rank.world_size, rank=rank.rank, comm=rank.comm if split else "none",
                         nccl_id=rank.nccl_id if split else b"", overlap=job.get("overlap", False))
    t0 = time.perf_counter()
    with NativeEngine(job["target"], job["drafter"], opts, variant=job.get("variant", "gpu")) as eng:
        load_s = time.perf_counter() - t0
        settings = NativeRunSettings(max_new_tokens=job["max_tokens"], budget=job["budget"])
        run_native(eng, job["prompts"], settings)  # warm-up: graphs captured, caches touched
        s = run_native(eng, job["prompts"], settings)
        mem = eng.memory()
    return {"tokens": [r.tokens for r in s.results], "tokens_per_s": s.tokens_per_s, "tau": s.tau,
            "rounds": s.rounds, "graph_steps": s.graph_steps, "load_s": load_s,
            "stage_us_per_round": {k: s.stage_us.get(k, 0.0) / max(1, s.rounds) for k in STAGES},
            "collective_us_per_round": s.collective_us / max(1, s.rounds),
            "collectives_per_round": s.collectives / max(1, s.rounds),
            "weights_gib": mem["weights"] / 2**30, "total_gib": mem["total"] / 2**30}


def _kimi_pair(b: GpusBench) -> tuple[Path, Path]:
    from kdtree_cli.bench.load import write_kimi_slice
    from python_engine.model.config import load_target_config
    from python_engine.model.synthetic_checkpoint import write_random_drafter

    tdir, ddir = b.scratch / "kimi-target", b.scratch / "kimi-drafter"
    if not (tdir / "model.safetensors.index.json").exists():
        b.say(f"writing a random Kimi K2-shaped slice to {tdir} ...")
        write_kimi_slice(tdir, seed=7)
    if not (ddir / "config.json").exists():
        write_random_drafter(ddir, load_target_config(tdir), seed=8, num_layers=1, block_size=8, num_heads=32,
                             num_kv_heads=8, head_dim=128, intermediate_size=4096)
    return tdir, ddir


def _prompts(b: GpusBench, vocab: int, demo: bool) -> list[list[int]]:
    import random

    from python_engine.demo.code_prompts import code_prompts

    if demo:  # the demo pair: lines of Python, as `kdtree bench engine` prompts it
        return code_prompts(b.prompts, PROMPT_SEED)
    rng = random.Random(PROMPT_SEED)
    return [[rng.randrange(vocab) for _ in range(rng.randrange(16, 64))] for _ in range(b.prompts)]


def _run(n: int, job: dict) -> dict:
    from python_engine.native.multi_gpu import check_ranks_agree, launch_ranks

    results = launch_ranks(n, _decode_rank, job, comm="nccl" if n > 1 else "none")
    check_ranks_agree([r["tokens"] for r in results])
    return results[0]


def run_gpus_bench(b: GpusBench) -> dict:
    from kdtree_cli.bench.gpu import git_commit
    from kdtree_cli.bench.provenance import run_record
    from python_engine.project import PROJECT_ROOT
    from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
    from python_engine.model.config import load_target_config
    from python_engine.native.multi_gpu import check_gpu_count

    if b.gpus < 2:
        raise KdtreeError("kdtree bench gpus compares 1 GPU with --gpus N >= 2")
    check_gpu_count(b.gpus)
    out: dict = {"run": run_record(b.gpus), "commit": git_commit(PROJECT_ROOT), "host": socket.gethostname(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "gpus": b.gpus, "prompts": b.prompts, "max_tokens": b.max_tokens, "budget": b.budget, "models": {}}
    for model in b.models:
        if model == "demo":
            tdir, ddir = DEFAULT_TARGET, DEFAULT_DRAFTER
        elif model == "kimi":
            tdir, ddir = _kimi_pair(b)
        else:
            raise KdtreeError(f"unknown model {model!r}: demo or kimi")
        prompts = _prompts(b, load_target_config(tdir).vocab_size, demo=model == "demo")
        m = out["models"][model] = {"target": str(tdir), "drafter": str(ddir), "runs": {}}
        # every dtype with all requests batched; on the Kimi slice also one request at budget
        # 64 in bf16 (the collectives' size and count of a batch-1 round on the real model),
        # and the batch as two halves whose all-reduces overlap the other half's compute
        configs = [(dtype, dtype, prompts, b.budget, False) for dtype in b.dtypes]
        if model == "kimi":
            configs.append(("bfloat16_batch1_budget64", "bfloat16", prompts[:1], 64, False))
            configs.append(("bfloat16_overlapped", "bfloat16", prompts, b.budget, True))
        for key, dtype, config_prompts, budget, overlap in configs:
            job = {"target": str(tdir), "drafter": str(ddir), "dtype": dtype, "prompts": config_prompts,
                   "max_tokens": b.max_tokens, "budget": budget, "overlap": overlap}
            runs = {}
            for n in (1, b.gpus):
                r = _run(n, job)
                total = sum(r["stage_us_per_round"][k] for k in STAGES if k != "host")
                r["collective_share"] = r["collective_us_per_round"] / total if total > 0 else 0.0
                runs[n] = r
                b.say(f"{model} {key} {n} GPU(s): {r['tokens_per_s']:.1f} tok/s, tau {r['tau']:.2f}, round "
                      f"{total / 1000:.2f} ms of which collectives {r['collective_us_per_round'] / 1000:.2f} ms "
                      f"({100 * r['collective_share']:.1f}%), weights {r['weights_gib']:.2f} GiB/GPU")
            same = runs[1]["tokens"] == runs[b.gpus]["tokens"]
            one, many = runs[1], runs[b.gpus]
            m["runs"][key] = {"requests": len(config_prompts), "budget": budget,
                "identical_to_1gpu": same,
                "speedup": many["tokens_per_s"] / one["tokens_per_s"] if one["tokens_per_s"] else 0.0,
                **{f"gpus_{n}": {k: v for k, v in r.items() if k != "tokens"} for n, r in runs.items()}}
            if key == "float32":
                b.say(f"{model} float32: {b.gpus} GPUs {'==' if same else '!='} 1 GPU, token for token")
    if b.out_dir:
        b.out_dir.mkdir(parents=True, exist_ok=True)
        (b.out_dir / "gpus.json").write_text(json.dumps(out, indent=2) + "\n")
        (b.out_dir / "gpus.md").write_text(gpus_markdown(out))
    if b.scratch.exists() and "kimi" in b.models:
        shutil.rmtree(b.scratch, ignore_errors=True)
    return out


def gpus_markdown(r: dict) -> str:
    n = r["gpus"]
    lines = [f"# native engine: 1 GPU vs {n} GPUs (commit {r['commit']}, {r['date']})", "",
             f"{r['prompts']} requests x {r['max_tokens']} tokens, DDTree budget {r['budget']}, all requests batched.",
             "Round stage times are means per round (CUDA events); collectives lie inside draft and verify;",
             "share = collectives / (draft + tree_build + verify + commit).", "",
             "| model | run | requests x budget | GPUs | identical to 1 GPU | tokens/s | speedup | tau | draft ms | "
             "verify ms | collectives (count) ms | share | weights GiB/GPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, m in r["models"].items():
        for dtype, d in m["runs"].items():
            for g in (1, n):
                x = d[f"gpus_{g}"]
                s = x["stage_us_per_round"]
                ident = "-" if g == 1 else ("yes" if d["identical_to_1gpu"] else "**no**")
                speed = "1.00" if g == 1 else f"{d['speedup']:.2f}"
                lines.append(f"| {model} | {dtype} | {d['requests']} x {d['budget']} | {g} | {ident} | "
                             f"{x['tokens_per_s']:.1f} | {speed} | {x['tau']:.2f} | {s['draft'] / 1000:.3f} | "
                             f"{s['verify'] / 1000:.3f} | {x['collective_us_per_round'] / 1000:.3f} "
                             f"({x['collectives_per_round']:.0f}) | {100 * x['collective_share']:.1f}% | "
                             f"{x['weights_gib']:.2f} |")
    return "\n".join(lines) + "\n"
