"""`kdtree run`: generate with the torch reference engine or the native engine (DDTree, or
plain AR with --ar)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.host_forwarding import forwarded_args, run_on_host
from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads
from python_engine.errors import KdtreeError


def register(app: typer.Typer) -> None:
    app.command("run")(run)


Opt = typer.Option


def run(
    ctx: typer.Context,
    model: Annotated[Path, Opt(help="Target checkpoint dir (config.json + safetensors).")],
    drafter: Annotated[Optional[Path], Opt(help="DFlash drafter dir (z-lab format); not needed with --ar.")] = None,
    prompt: Annotated[Optional[list[str]], Opt(
        "--prompt", help="Prompt text (needs tokenizer.json in the model dir), encoded as `kdtree demo` "
        "encodes it: the model's BOS, then the text's tokens; repeat for several requests.")] = None,
    prompt_ids: Annotated[Optional[list[str]], Opt(
        "--prompt-ids", help="Prompt as comma-separated token ids, e.g. 1,2,3; repeatable.")] = None,
    prompts_file: Annotated[Optional[Path], Opt(
        "--prompts", help="A file of prompts: one text per line, or JSON lines {\"prompt\": ...} / "
        "{\"ids\": [...]}; all of them decoded together (native: continuous batching).",
        show_default=False)] = None,
    engine: Annotated[str, Opt(help="Engine: torch (the reference), native (the CUDA engine; needs `kdtree build` "
                               "and a GPU), or auto (native when available).")] = "torch",
    budget: Annotated[str, Opt(help="DDTree node budget N, or auto: each round the tree size that maximises "
                               "expected tokens/s (the drafter's path probabilities over a verify cost model "
                               "timed at start-up; torch engine).")] = "32",
    max_budget: Annotated[int, Opt("--max-budget", min=1, help="With --budget auto: the largest tree it "
                                   "considers.")] = 64,
    block_size: Annotated[Optional[int], Opt(help="Drafter block size (default: the drafter's).")] = None,
    temperature: Annotated[float, Opt(help="0 = greedy; > 0 samples (lossless under DDTree).")] = 0.0,
    max_tokens: Annotated[int, Opt(help="Tokens to generate per request.")] = 128,
    seed: Annotated[int, Opt(help="Sampling seed.")] = 0,
    device: Annotated[Optional[str], Opt(help="cpu, cuda, cuda:N (default: cuda if available).")] = None,
    dtype: Annotated[Optional[str], Opt(
        help="float32 or bfloat16 (default: bfloat16 on cuda, float32 on cpu).")] = None,
    metrics: Annotated[Optional[str], Opt(help="Write metrics events (JSON lines) to FILE, or - for stdout.")] = None,
    ar: Annotated[bool, Opt("--ar", help="Plain autoregressive decoding (no drafter).")] = False,
    ignore_eos: Annotated[bool, Opt("--ignore-eos", help="Do not stop at the model's EOS tokens.")] = False,
    threads: Threads = DEFAULT_THREADS,
    prometheus: Annotated[Optional[int], Opt(
        "--prometheus", help="Serve Prometheus metrics (acceptance length, per-depth rates, tokens/s, stage "
        "times) on this port for the run's duration.", show_default=False)] = None,
    max_slots: Annotated[Optional[int], Opt(
        "--max-slots", help="Native engine: requests decoded at once (default: all of them, up to 64).",
        show_default=False)] = None,
    gpus: Annotated[int, Opt(
        "--gpus", min=1, help="Native engine: split the model over N GPUs (cuda:0..N-1; pick them with "
        "CUDA_VISIBLE_DEVICES), tensor and expert parallel, one process per GPU. Every rank decodes the same "
        "requests; a rank that fails stops the run on all of them.")] = 1,
    load_format: Annotated[str, Opt(
        "--load-format", help="Native engine: checkpoint (read the model's safetensors) or dummy (make every "
        "weight on the GPU from --seed, no files: for timing and memory; the output says so and its tokens mean "
        "nothing). A config.json is all --model needs then.")] = "checkpoint",
    world_size: Annotated[int, Opt(
        "--world-size", min=1, help="Native engine, with --comm none: run one rank's share of a model split over "
        "N GPUs alone on this GPU (its part of every weight and cache; the collectives do nothing and are "
        "reported as not run), so one GPU measures what each of N computes in a round.")] = 1,
    rank: Annotated[int, Opt("--rank", min=0, help="With --world-size: which rank's share.")] = 0,
    comm: Annotated[str, Opt(
        "--comm", help="With --world-size N > 1: none (one rank's share alone; the only choice here: --gpus N "
        "runs real ranks over NCCL).")] = "none",
    gpu_memory_limit: Annotated[Optional[float], Opt(
        "--gpu-memory-limit", help="Native engine: GiB it may use on its GPU (e.g. 96 for an RTX PRO 6000 on a "
        "larger card); what does not fit is refused before anything is allocated, naming what to lower.",
        show_default=False)] = None,
    tui: Annotated[bool, Opt("--tui", help="Watch this run in the live monitor (kdtree tui).")] = False,
    host: Annotated[Optional[str], Opt(
        "--host", help="Run on this host from kdtree.toml (paths are the host's), streaming output back.",
        show_default=False)] = None,
) -> None:
    """Generate with DDTree (or --ar) and print each request's tokens (or text) and a summary."""
    from python_engine.decode.budget_auto import parse_budget
    from python_engine.decode.run_command import RunRequest
    from python_engine.run import run_command

    if tui or host:
        _delegate(forwarded_args(ctx, drop=("tui", "host")), tui=tui, host=host)
        return

    use_threads(threads)
    request = RunRequest(
        model=model, drafter=drafter, prompts=prompt or [], prompt_ids=prompt_ids or [],
        budget=parse_budget(budget), max_budget=max_budget, block_size=block_size, temperature=temperature, max_tokens=max_tokens,
        seed=seed, device=device, dtype=dtype, metrics=metrics, ar=ar, ignore_eos=ignore_eos,
        engine=engine, prompts_file=prompts_file, prometheus=prometheus, max_slots=max_slots,
        gpus=gpus, load_format=_choice("--load-format", load_format, ("checkpoint", "dummy")), world_size=world_size,
        rank=rank, gpu_memory_limit_gib=gpu_memory_limit,
    )
    _choice("--comm", comm, ("none",))
    run_command(request, stdout=sys.stdout, stderr=sys.stderr)


def _delegate(args: list[str], *, tui: bool, host: Optional[str]) -> None:
    """Run elsewhere: on a remote host (output streamed back), under the monitor, or both."""
    if tui:
        try:
            from kdtree_cli.tui.launch import closing_line, run_monitor
            from kdtree_cli.tui.sources.local_run import LocalRunSource
            from kdtree_cli.tui.sources.ssh_host import HostSource
        except ImportError as exc:
            raise KdtreeError(f"--tui needs the live monitor (pip install 'kdtree[tui]'): {exc}") from None
        source = HostSource(host, args) if host else LocalRunSource(args)
        typer.echo(closing_line(run_monitor(source)))
        return
    run_on_host(host, ["run"], args)


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise KdtreeError(f"{option} {value!r}: choose {' or '.join(allowed)}")
    return value
