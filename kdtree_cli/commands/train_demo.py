"""`kdtree train-demo`: the demo pair's whole recipe, stage by stage (corpus, tokenizer,
target, drafter, eval, export), reproducible from the recipe's fixed seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads
from python_engine.project import PROJECT_ROOT

DEFAULT_DATA = PROJECT_ROOT / ".demo-data"
DEFAULT_WORK = PROJECT_ROOT / ".demo-work"
DEFAULT_MODELS = PROJECT_ROOT / "refs" / "models"
DEFAULT_RESULTS = PROJECT_ROOT / "results" / "demo"


def train_demo(
    stage: Annotated[
        Optional[list[str]],
        typer.Option("--stage", help="corpus, tokenizer, target, drafter, eval, export, or all (repeatable). "
                     "'all' resumes: finished stages are skipped.", show_default="all"),
    ] = None,
    recipe: Annotated[str, typer.Option(help="Recipe preset: demo (the shipped pair) or smoke (tiny, CPU).")] = "demo",
    steps: Annotated[Optional[int], typer.Option(help="Override the target's training steps.",
                                                 show_default=False)] = None,
    drafter_steps: Annotated[Optional[int], typer.Option(help="Override the drafter's training steps.",
                                                         show_default=False)] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    data_dir: Annotated[Path, typer.Option(help="Corpus and tokenizer (built here, carried to a GPU box).",
                                           file_okay=False, show_default=".demo-data")] = DEFAULT_DATA,
    work_dir: Annotated[Path, typer.Option(help="Checkpoints, histories and evaluation of each stage.",
                                           file_okay=False, show_default=".demo-work")] = DEFAULT_WORK,
    models_dir: Annotated[Optional[Path], typer.Option(
        help="Where export puts demo-target/ and demo-drafter/ (default: refs/models for the demo recipe, "
             "WORK_DIR/export otherwise).", file_okay=False, show_default=False)] = None,
    results_dir: Annotated[Optional[Path], typer.Option(
        help="Where export puts eval.json, summary.md and the loss curves (default: results/demo for the "
             "demo recipe, WORK_DIR/export/results otherwise).", file_okay=False, show_default=False)] = None,
    stdlib: Annotated[Optional[Path], typer.Option(help="Standard-library folder for the corpus "
                                                   "(default: this Python's).", file_okay=False,
                                                   show_default=False)] = None,
    experts: Annotated[str, typer.Option(help="transformers experts implementation for training: eager or "
                                         "grouped_mm.")] = "eager",
    force: Annotated[bool, typer.Option("--force", help="Redo stages that already finished.")] = False,
    threads: Threads = DEFAULT_THREADS,
) -> None:
    """Train the demo target (DeepSeek-V3 architecture) and its DFlash drafter, evaluate them."""
    from python_engine.train.recipe import get_recipe
    from python_engine.train.stages import DemoPaths, run_stages

    use_threads(threads)
    chosen = get_recipe(recipe).with_steps(steps, drafter_steps)
    shipped = recipe == "demo"
    paths = DemoPaths(
        data_dir=data_dir,
        work_dir=work_dir,
        models_dir=models_dir or (DEFAULT_MODELS if shipped else work_dir / "export"),
        results_dir=results_dir or (DEFAULT_RESULTS if shipped else work_dir / "export" / "results"),
    )
    ran = run_stages(stage or ["all"], chosen, paths, device, stdlib=stdlib, experts=experts, force=force,
                     say=lambda line: print(line, flush=True))
    print(f"train-demo: ran {', '.join(ran) if ran else 'nothing (all stages done)'}", flush=True)


def register(app: typer.Typer) -> None:
    app.command("train-demo")(train_demo)


if __name__ == "__main__":
    # `python3 -m kdtree_cli.commands.train_demo ...`: the same command without loading the
    # other commands' modules (the GPU box runs this with only torch, transformers and typer)
    typer.run(train_demo)
