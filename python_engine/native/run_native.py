"""`kdtree run --engine native`: the native engine behind the same command as the torch
engine: load (with a progress bar when it takes more than a second), encode the prompts,
decode them all with continuous batching, metrics events (with trees and GPU figures),
each request's output, a summary.

With --gpus N (N > 1) the model is split over N GPUs, one process each (multi_gpu.py):
this process plans the run, every rank runs the same plan, rank 0's events and stderr come
back here (rank_relay.py), and the outputs are written here once the ranks agree."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING

from python_engine.errors import KdtreeError
from python_engine.events import EventWriter

if TYPE_CHECKING:
    from python_engine.decode.prompts import TextCodec
    from python_engine.decode.run_command import RunRequest
    from python_engine.native.engine import NativeOptions
    from python_engine.native.generate import NativeRunSettings, NativeRunSummary
    from python_engine.native.multi_gpu import Rank

MAX_SLOTS = 64  # requests decoded together by default
PROGRESS_AFTER_S = 1.0  # a load that takes longer shows a progress bar
TREE_EVERY = 8  # a sampled tree on every 8th step's round events


@dataclass(frozen=True)
class NativePlan:
    """What every rank runs, made once before any engine exists, so that all ranks decode
    the same prompts in the same order."""
    req: RunRequest
    prompts: list[list[int]]
    options: NativeOptions
    settings: NativeRunSettings
    gpus: int

    @property
    def devices(self) -> str:
        return f"cuda:{self.options.device}" if self.gpus == 1 else f"cuda:0-{self.gpus - 1}"


def run_native_command(req: RunRequest, events: EventWriter, stdout: IO[str], stderr: IO[str]) -> list:
    from rich.console import Console

    from python_engine.decode.prompts import TextCodec

    codec = TextCodec(req.model)
    plan = plan_native_run(req, codec)
    summary = run_rank(plan, events, stderr) if plan.gpus == 1 else _run_on_gpus(plan, events, stderr)
    out = Console(file=stderr if req.metrics == "-" else stdout, highlight=False, soft_wrap=True)
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
    if plan.options.load_format == "dummy":
        mode += " on DUMMY weights (the tokens above mean nothing)"
    if plan.options.rank_share:
        mode += f", rank {plan.options.rank} of {plan.options.world_size} alone"
    out.print(f"[bold]summary[/] native {mode}, {plan.devices}, {plan.options.dtype}: {summary.tokens} tokens in "
              f"{len(summary.results)} request(s), tau {summary.tau:.2f}, {summary.tokens_per_s:.1f} tokens/s "
              f"aggregate ({summary.rounds} rounds, {decode_s:.2f} s of request decode time)")
    return summary.results


def plan_native_run(req: RunRequest, codec: TextCodec) -> NativePlan:
    """Check the request, encode its prompts, size the engine: everything before the load."""
    from python_engine.decode.prompts import parse_ids
    from python_engine.decode.run_command import read_prompts_file
    from python_engine.model.config import load_target_config
    from python_engine.native.device_option import ANY_CUDA, cuda_device_index
    from python_engine.native.engine import NativeOptions
    from python_engine.native.generate import NativeRunSettings

    texts, id_lists = list(req.prompts), list(req.prompt_ids)
    file_ids: list[list[int]] = []
    if req.prompts_file is not None:
        more_texts, file_ids = read_prompts_file(req.prompts_file)
        texts += more_texts
    if not texts and not id_lists and not file_ids:
        raise KdtreeError("give at least one --prompt TEXT, --prompt-ids 1,2,3 or --prompts FILE")
    device = cuda_device_index(req.device)
    if req.gpus > 1 and req.device not in ANY_CUDA:
        raise KdtreeError(f"--gpus {req.gpus} runs on cuda:0..{req.gpus - 1}, not --device {req.device}: "
                          "choose the GPUs with CUDA_VISIBLE_DEVICES")
    if not req.ar and req.drafter is None:
        raise KdtreeError("DDTree needs --drafter DIR (or pass --ar for plain autoregressive decoding)")
    cfg = load_target_config(req.model)
    prompts = [codec.encode(t) for t in texts] + [parse_ids(p, cfg.vocab_size) for p in id_lists]
    for ids in file_ids:
        bad = [i for i in ids if not 0 <= i < cfg.vocab_size]
        if bad:
            raise KdtreeError(f"--prompts: token ids {bad[:5]} are outside the vocab 0..{cfg.vocab_size - 1}")
        prompts.append(ids)
    slots = max(1, min(req.max_slots or len(prompts), MAX_SLOTS))
    longest = max(len(p) for p in prompts)
    check_rank_share(req)
    opts = NativeOptions(dtype=req.dtype or "bfloat16", device=device, max_slots=slots,
                         max_tokens=longest + req.max_tokens, max_budget=0 if req.ar else req.budget,
                         max_block_size=req.block_size or 0, load_format=req.load_format, dummy_seed=req.seed,
                         world_size=req.world_size, rank=req.rank,
                         memory_limit=gib_bytes(req.gpu_memory_limit_gib))
    settings = NativeRunSettings(max_new_tokens=req.max_tokens, budget=req.budget, block_size=req.block_size or 0,
                                 temperature=req.temperature, seed=req.seed, ar=req.ar,
                                 stop_ids=() if req.ignore_eos else tuple(cfg.eos_token_ids)[:16],
                                 tree_every=0 if req.ar else TREE_EVERY)
    return NativePlan(req, prompts, opts, settings, req.gpus)


def gib_bytes(gib: float | None) -> int:
    """--gpu-memory-limit GiB as the engine's bytes (None: no limit but the device's)."""
    if gib is None:
        return 0
    if not gib > 0:
        raise KdtreeError(f"--gpu-memory-limit {gib:g}: give the GiB the engine may use on its GPU (> 0)")
    return int(gib * 2**30)


def check_rank_share(req: RunRequest) -> None:
    """--world-size N --rank R (comm none): one rank's share on this GPU; not with --gpus."""
    if req.world_size < 1 or not 0 <= req.rank < req.world_size:
        raise KdtreeError(f"--rank {req.rank} of --world-size {req.world_size}: the rank must be in 0..world_size-1")
    if req.world_size > 1 and req.gpus > 1:
        raise KdtreeError("--world-size runs one rank's share alone on one GPU (its collectives do nothing); "
                          "--gpus splits the model over real ranks: give one or the other")


def run_rank(plan: NativePlan, events: EventWriter, stderr: IO[str], rank: Rank | None = None) -> NativeRunSummary:
    """Load the engine (one GPU, or this rank's share of several) and decode the plan's
    prompts; the run_start and round events go to `events`."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from python_engine.native.engine import NativeEngine
    from python_engine.native.generate import run_native
    from python_engine.native.gpu_stats import GpuSampler

    req, opts = plan.req, plan.options
    if rank is not None:
        opts = replace(opts, device=rank.device, world_size=rank.world_size, rank=rank.rank, comm=rank.comm,
                       nccl_id=rank.nccl_id)
    err = Console(file=stderr, highlight=False)
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
        share = ", each GPU's share" if plan.gpus > 1 else ""
        if opts.rank_share:
            share = f", rank {opts.rank}'s share of {opts.world_size} alone: collectives not run"
        if opts.load_format == "dummy":
            share += f"; DUMMY weights (seed {opts.dummy_seed}): timing and memory only, the tokens mean nothing"
        err.print(f"[dim]native engine on {plan.devices} ({opts.dtype}{share}): {mem['total'] / 2**30:.2f} GiB "
                  f"(weights {mem['weights'] / 2**30:.2f}, caches {(mem['target_cache'] + mem['drafter_cache']) / 2**30:.2f}, "
                  f"workspace {mem['workspace'] / 2**30:.2f}), {opts.max_slots} slot(s)[/]")
        d = engine.drafter_config
        several = {"world_size": plan.gpus} if plan.gpus > 1 else {}
        if opts.rank_share:
            several = {"world_size": opts.world_size, "rank": opts.rank, "collectives": "not run"}
        if opts.load_format == "dummy":
            several["weights"] = "dummy"
        events.emit("run_start", engine="native", model=req.model.name, drafter="" if req.ar else req.drafter.name,
                    device=plan.devices, host=socket.gethostname(), dtype=opts.dtype,
                    block_size=1 if req.ar else (req.block_size or d.block_size), budget=0 if req.ar else req.budget,
                    temperature=req.temperature, **several)
        lead = rank is None or rank.rank == 0
        sampler = GpuSampler(list(range(plan.gpus)) if rank is not None else [opts.device]) if lead else None
        return run_native(engine, plan.prompts, plan.settings, events, gpus=sampler)


def _run_on_gpus(plan: NativePlan, events: EventWriter, stderr: IO[str]) -> NativeRunSummary:
    """Every rank runs the plan; rank 0's events and stderr come here; the ranks' tokens must agree."""
    from python_engine.native.multi_gpu import check_ranks_agree, launch_ranks
    from python_engine.native.rank_relay import Relay

    tty = bool(getattr(stderr, "isatty", lambda: False)())
    summaries = launch_ranks(plan.gpus, _rank_worker, (plan, tty), on_message=Relay(events, {"stderr": stderr}))
    check_ranks_agree([[r.tokens for r in s.results] for s in summaries])
    return summaries[0]


def _rank_worker(rank: Rank, args: tuple[NativePlan, bool]) -> NativeRunSummary:
    """One rank's process: rank 0 reports through the launcher, the others keep quiet (their
    errors reach the launcher as the rank's failure)."""
    from python_engine.native.rank_relay import PostedStream, posted_events

    plan, tty = args
    if rank.rank == 0:
        return run_rank(plan, posted_events(rank), PostedStream(rank, "stderr", tty), rank)
    with open(os.devnull, "w") as quiet:
        return run_rank(plan, EventWriter(None), quiet, rank)
