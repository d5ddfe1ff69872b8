"""`kdtree train-agree`: the agree pair (a random Kimi-style target and a DFlash drafter
self-distilled to agree with it) regenerated from the recipe's seeds on a CPU, evaluated
with the reference engine, and written where it is committed."""

from __future__ import annotations

import datetime
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from python_engine.refgen.sync import PROJECT_ROOT

DEFAULT_MODELS = PROJECT_ROOT / "refs" / "models"
DEFAULT_RESULTS = PROJECT_ROOT / "results" / "agree-pair"


def provenance(argv: list[str]) -> dict:
    """The command line, the checkout's commit (with '+dirty' when it has changes), the date
    and the machine, for results/agree-pair."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "command": shlex.join(["kdtree", "train-agree", *argv]),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} thread(s)",
    }


def train_agree(
    recipe: Annotated[str, typer.Option(help="Recipe preset: agree (the shipped pair) or smoke (tiny, seconds).")]
    = "agree",
    drafter_steps: Annotated[Optional[int], typer.Option(help="Override the drafter's training steps.",
                                                         show_default=False)] = None,
    models_dir: Annotated[Optional[Path], typer.Option(
        help="Where agree-target/ and agree-drafter/ go (default: refs/models for the agree recipe; required "
             "for another).", file_okay=False, show_default=False)] = None,
    results_dir: Annotated[Optional[Path], typer.Option(
        help="Where eval.json, summary.md and drafter-history.json go (default: results/agree-pair for the "
             "agree recipe, MODELS_DIR/results otherwise).", file_okay=False, show_default=False)] = None,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads (the recipe's timings are for 1).")] = 1,
) -> None:
    """Make the agree pair: write the random target, self-distil its drafter, evaluate DDTree vs AR."""
    import torch

    from python_engine.errors import KdtreeError
    from python_engine.train.agree_pair import train_agree_pair
    from python_engine.train.agree_recipe import get_agree_recipe, with_drafter_steps

    chosen = with_drafter_steps(get_agree_recipe(recipe), drafter_steps)
    if models_dir is None:
        if recipe != "agree":
            raise KdtreeError(f"recipe {recipe}: pass --models-dir (refs/models holds the shipped agree pair only)")
        models_dir = DEFAULT_MODELS
    results_dir = results_dir or (DEFAULT_RESULTS if recipe == "agree" else models_dir / "results")
    torch.set_num_threads(threads)
    result = train_agree_pair(chosen, models_dir, results_dir, provenance(sys.argv[2:] if len(sys.argv) > 2 else []),
                              say=lambda line: print(line, flush=True))
    taus = ", ".join(f"{r['budget']}: {r['tau']:.2f}" for r in result["t0"])
    print(f"train-agree: tau by budget {taus}; identical to AR: {result['all_identical_to_ar']}; "
          f"results in {results_dir}", flush=True)


def register(app: typer.Typer) -> None:
    app.command("train-agree")(train_agree)


if __name__ == "__main__":
    typer.run(train_agree)
