"""`kdtree run`: generate with the torch reference engine (DDTree, or plain AR with --ar)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads
from python_engine.errors import KdtreeError


def register(app: typer.Typer) -> None:
    app.command("run")(run)


Opt = typer.Option


def run(
    model: Annotated[Path, Opt(help="Target checkpoint dir (config.json + safetensors).")],
    drafter: Annotated[Optional[Path], Opt(help="DFlash drafter dir (z-lab format); not needed with --ar.")] = None,
    prompt: Annotated[Optional[list[str]], Opt(
        "--prompt", help="Prompt text (needs tokenizer.json in the model dir), encoded as `kdtree demo` "
        "encodes it: the model's BOS, then the text's tokens; repeat for several requests.")] = None,
    prompt_ids: Annotated[Optional[list[str]], Opt(
        "--prompt-ids", help="Prompt as comma-separated token ids, e.g. 1,2,3; repeatable.")] = None,
    engine: Annotated[str, Opt(help="Engine: torch (the reference).")] = "torch",
    budget: Annotated[int, Opt(help="DDTree node budget N.")] = 32,
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
    tui: Annotated[bool, Opt("--tui", help="Watch this run in the live monitor (kdtree tui).")] = False,
    host: Annotated[Optional[str], Opt(
        "--host", help="Run on this host from kdtree.toml (paths are the host's), streaming output back.",
        show_default=False)] = None,
) -> None:
    """Generate with the PyTorch reference engine and print tokens (or text) and a summary."""
    from python_engine.decode.run_command import RunRequest, run_command

    if tui or host:
        _delegate(forwarded_args(sys.argv), tui=tui, host=host)
        return

    if engine != "torch":
        raise KdtreeError(f"--engine {engine!r}: `kdtree run` drives the torch engine only")
    use_threads(threads)
    request = RunRequest(
        model=model, drafter=drafter, prompts=prompt or [], prompt_ids=prompt_ids or [],
        budget=budget, block_size=block_size, temperature=temperature, max_tokens=max_tokens,
        seed=seed, device=device, dtype=dtype, metrics=metrics, ar=ar, ignore_eos=ignore_eos,
    )
    run_command(request, stdout=sys.stdout, stderr=sys.stderr)


def forwarded_args(argv: list[str]) -> list[str]:
    """This invocation's `run` arguments minus --tui and --host: what a child run (under the
    monitor, or on a remote host) gets."""
    args = argv[argv.index("run") + 1:] if "run" in argv else []
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--tui" or arg.startswith("--host="):
            continue
        elif arg == "--host":
            skip = True
        else:
            out.append(arg)
    return out


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
    from remote.exec import run_kdtree

    status = run_kdtree(host, ["run", *args])
    if status:
        raise typer.Exit(status)
