"""`kdtree run --engine native`: the native engine behind the same command as the torch
engine: load (with a progress bar when it takes more than a second), encode the prompts,
decode them all with continuous batching, metrics events (with trees and GPU figures),
each request's output, a summary."""

from __future__ import annotations

import socket
import time
from typing import IO

from python_engine.errors import KdtreeError
from python_engine.events import EventWriter

MAX_SLOTS = 64  # requests decoded together by default
PROGRESS_AFTER_S = 1.0  # a load that takes longer shows a progress bar
TREE_EVERY = 8  # a sampled tree on every 8th step's round events


def run_native_command(req, events: EventWriter, stdout: IO[str], stderr: IO[str]) -> list:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from python_engine.decode.prompts import TextCodec, parse_ids
    from python_engine.decode.run_command import read_prompts_file
    from python_engine.model.config import load_target_config
    from python_engine.native.engine import NativeEngine, NativeOptions
    from python_engine.native.generate import NativeRunSettings, run_native
    from python_engine.native.gpu_stats import GpuSampler

    texts, id_lists = list(req.prompts), list(req.prompt_ids)
    file_ids: list[list[int]] = []
    if req.prompts_file is not None:
        more_texts, file_ids = read_prompts_file(req.prompts_file)
        texts += more_texts
    if not texts and not id_lists and not file_ids:
        raise KdtreeError("give at least one --prompt TEXT, --prompt-ids 1,2,3 or --prompts FILE")
    if req.device not in (None, "", "auto", "cuda") and not str(req.device).startswith("cuda:"):
        raise KdtreeError(f"--engine native runs on CUDA devices (cuda, cuda:N), not {req.device!r}")
    if not req.ar and req.drafter is None:
        raise KdtreeError("DDTree needs --drafter DIR (or pass --ar for plain autoregressive decoding)")
    device = 0 if req.device in (None, "", "auto", "cuda") else int(str(req.device)[5:])
    dtype = req.dtype or "bfloat16"
    cfg = load_target_config(req.model)
    codec = TextCodec(req.model)
    prompts = [codec.encode(t) for t in texts] + [parse_ids(p, cfg.vocab_size) for p in id_lists]
    for ids in file_ids:
        bad = [i for i in ids if not 0 <= i < cfg.vocab_size]
        if bad:
            raise KdtreeError(f"--prompts: token ids {bad[:5]} are outside the vocab 0..{cfg.vocab_size - 1}")
        prompts.append(ids)
    slots = max(1, min(req.max_slots or len(prompts), MAX_SLOTS))
    longest = max(len(p) for p in prompts)
    opts = NativeOptions(dtype=dtype, device=device, max_slots=slots, max_tokens=longest + req.max_tokens,
                         max_budget=0 if req.ar else req.budget, max_block_size=req.block_size or 0)

    err = Console(file=stderr, highlight=False)
    out = Console(file=stderr if req.metrics == "-" else stdout, highlight=False, soft_wrap=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                        console=err, transient=True)
    started = time.perf_counter()
    task = None

    def on_load(done: int, total: int) -> None:
        nonlocal task
        if task is None and time.perf_counter() - started > PROGRESS_AFTER_S:
            progress.start()
            task = progress.add_task(f"loading {req.model.name} (native)", total=total)
        if task is not None:
            progress.update(task, completed=done, total=total)

    try:
        engine = NativeEngine(req.model, None if req.ar else req.drafter, opts, variant="gpu", progress=on_load)
    finally:
        progress.stop()
    with engine:
        mem = engine.memory()
        err.print(f"[dim]native engine on cuda:{device} ({dtype}): {mem['total'] / 2**30:.2f} GiB "
                  f"(weights {mem['weights'] / 2**30:.2f}, caches {(mem['target_cache'] + mem['drafter_cache']) / 2**30:.2f}, "
                  f"workspace {mem['workspace'] / 2**30:.2f}), {slots} slot(s)[/]")
        d = engine.drafter_config
        events.emit("run_start", engine="native", model=req.model.name, drafter="" if req.ar else req.drafter.name,
                    device=f"cuda:{device}", host=socket.gethostname(), dtype=dtype,
                    block_size=1 if req.ar else (req.block_size or d.block_size), budget=0 if req.ar else req.budget,
                    temperature=req.temperature)
        settings = NativeRunSettings(max_new_tokens=req.max_tokens, budget=req.budget, block_size=req.block_size or 0,
                                     temperature=req.temperature, seed=req.seed, ar=req.ar,
                                     stop_ids=() if req.ignore_eos else tuple(cfg.eos_token_ids)[:16],
                                     tree_every=0 if req.ar else TREE_EVERY)
        summary = run_native(engine, prompts, settings, events, gpus=GpuSampler([device]))
    for i, r in enumerate(summary.results):
        text = codec.decode(r.tokens)
        out.print(f"[bold]request {i}[/] ({len(r.tokens)} tokens, tau {r.tau:.2f}):")
        out.print(text if text is not None else " ".join(map(str, r.tokens)), markup=False)
    decode_s = sum(r.decode_s for r in summary.results)
    # rounds as the contract counts them: one per request per target forward (the round events)
    events.emit("run_end", tokens=summary.tokens, decode_s=round(summary.wall_s, 6),
                tokens_per_s=round(summary.tokens_per_s, 3), tau=round(summary.tau, 4),
                rounds=sum(r.rounds for r in summary.results), batched_steps=summary.rounds,
                ttft_s=round(sum(r.prefill_s for r in summary.results) / len(summary.results), 6))
    mode = "AR" if req.ar else f"DDTree budget {req.budget}"
    out.print(f"[bold]summary[/] native {mode}, cuda:{device}, {dtype}: {summary.tokens} tokens in "
              f"{len(summary.results)} request(s), tau {summary.tau:.2f}, {summary.tokens_per_s:.1f} tokens/s "
              f"aggregate ({summary.rounds} rounds, {decode_s:.2f} s of request decode time)")
    return summary.results
