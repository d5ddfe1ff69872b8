"""`kdtree demo`: DDTree on the shipped demo pair, next to an AR baseline from the same run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads
from python_engine.demo.defaults import (DEFAULT_BUDGET, DEFAULT_DRAFTER, DEFAULT_MAX_TOKENS, DEFAULT_PROMPT,
                                         DEFAULT_TARGET, INT4_TARGET)
from python_engine.errors import KdtreeError


def demo(
    prompt: Annotated[str, typer.Option(help="Prompt text (the pair knows Python standard-library code), "
                                        "encoded as `kdtree run --prompt` encodes it: BOS, then the text.",
                                        show_default="a Python function header")] = DEFAULT_PROMPT,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate.")] = DEFAULT_MAX_TOKENS,
    budget: Annotated[int, typer.Option(help="DDTree node budget N.")] = DEFAULT_BUDGET,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    engine: Annotated[str, typer.Option(help="auto (native if built and a GPU is present, else torch), "
                                        "native or torch.")] = "auto",
    temperature: Annotated[float, typer.Option(help="0 = greedy (DDTree text must equal AR's); > 0 samples.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    model: Annotated[Optional[Path], typer.Option(help="Target checkpoint dir.", file_okay=False,
                                                  show_default="refs/models/demo-target")] = None,
    int4: Annotated[bool, typer.Option("--int4", help="Use the INT4 demo target (refs/models/demo-target-int4: "
                                       "routed experts in INT4, the same drafter).")] = False,
    drafter: Annotated[Path, typer.Option(help="DFlash drafter dir.", file_okay=False,
                                          show_default="refs/models/demo-drafter")] = DEFAULT_DRAFTER,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Do not stop at EOS.")] = False,
    metrics: Annotated[Optional[str], typer.Option(help="Write the DDTree run's metrics events to FILE, "
                                                   "or - for stdout (the text then goes to stderr).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    threads: Threads = DEFAULT_THREADS,
    tui: Annotated[bool, typer.Option("--tui", help="Watch the run in the live monitor (kdtree tui).")] = False,
) -> None:
    """Run DDTree on the demo pair: the continuation, tau, tokens/s, and the speedup over AR.

    At temperature 0 DDTree's text must equal AR's: when it does not, the command says so and exits with status 1.
    """
    from python_engine.demo.report import print_result, run_with_metrics

    if int4 and model is not None:
        raise KdtreeError("--int4 and --model both choose the target: pass one of them")
    model = INT4_TARGET if int4 else (model or DEFAULT_TARGET)
    settings = dict(target_dir=model, drafter_dir=drafter, prompt=prompt, max_tokens=max_tokens, budget=budget,
                    temperature=temperature, seed=seed, engine=engine, device=device, ignore_eos=ignore_eos)
    if tui:
        _open_tui(settings, threads)
        return
    use_threads(threads)
    result = run_with_metrics(settings, metrics)
    print_result(result, to_stderr=metrics == "-", as_json=json_out)
    if result.temperature == 0 and not result.identical:
        raise KdtreeError(
            f"DDTree's text differs from AR's at temperature 0 (first difference at token "
            f"{result.first_difference}): greedy DDTree must reproduce AR exactly, so this is a bug "
            "in the engine or the drafter's wiring, not in the model")


def child_args(settings: dict) -> list[str]:
    """The same demo as command-line arguments, for the monitor's child process."""
    args = ["--prompt", settings["prompt"], "--max-tokens", str(settings["max_tokens"]),
            "--budget", str(settings["budget"]), "--temperature", str(settings["temperature"]),
            "--seed", str(settings["seed"]), "--engine", settings["engine"], "--device", settings["device"],
            "--model", str(settings["target_dir"]), "--drafter", str(settings["drafter_dir"])]
    return args + (["--ignore-eos"] if settings["ignore_eos"] else [])


def _open_tui(settings: dict, threads: int) -> None:
    """Run this same demo as a child process (events on its stdout) inside the monitor."""
    try:
        from kdtree_cli.tui.launch import closing_line, run_monitor
        from kdtree_cli.tui.sources.local_run import LocalRunSource
    except ImportError as exc:
        raise KdtreeError(f"--tui needs the live monitor (kdtree tui), which is not available here: {exc}") from None
    command = [sys.executable, "-m", "kdtree_cli", "demo", *child_args(settings), "--threads", str(threads),
               "--metrics", "-"]
    stats = run_monitor(LocalRunSource([], command=command))
    typer.echo(closing_line(stats))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
