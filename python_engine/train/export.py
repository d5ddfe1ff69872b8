"""Shipping the demo pair: copy the trained folders where they are committed
(refs/models/demo-target, demo-drafter), write the target's INT4 twin beside them
(demo-target-int4, which runs with the same drafter), and the evaluation where it is read
(results/demo), refusing a pair over the repository's size limits."""

from __future__ import annotations

import shutil
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.train.stages import DemoPaths, stage_done
from python_engine.train.target_model import copy_tokenizer

SHARD_LIMIT = 8 * 1024 * 1024  # bytes, each shipped safetensors file
PAIR_LIMIT = 24 * 1024 * 1024  # bytes, both model folders together
# tensor bytes per INT4 shard: under SHARD_LIMIT with room for the safetensors header
INT4_SHARD_BYTES = 7 * 1024 * 1024
TARGETS = ("demo-target", "demo-target-int4")  # each ships with the one demo-drafter
RESULT_FILES = ("eval.json", "summary.md", "target-loss.png", "drafter-loss.png", "drafter-acceptance.png",
                "target-history.json", "drafter-history.json", "recipe.json")


def pair_sizes(models_dir: Path, target: str = "demo-target", drafter: str = "demo-drafter") -> dict[str, int]:
    sizes = {}
    for sub in (target, drafter):
        for f in sorted((models_dir / sub).iterdir()):
            sizes[f"{sub}/{f.name}"] = f.stat().st_size
    return sizes


def check_pair_sizes(models_dir: Path, target: str = "demo-target", drafter: str = "demo-drafter") -> int:
    sizes = pair_sizes(models_dir, target, drafter)
    big = [f"{n} ({s / 2**20:.1f} MiB)" for n, s in sizes.items() if n.endswith(".safetensors") and s >= SHARD_LIMIT]
    if big:
        raise KdtreeError(f"shards over 8 MiB: {', '.join(big)}")
    total = sum(sizes.values())
    if total > PAIR_LIMIT:
        raise KdtreeError(f"the pair {target} + {drafter} takes {total / 2**20:.1f} MiB, over the 24 MiB limit")
    return total


def write_int4_target(models_dir: Path) -> Path:
    """models_dir/demo-target-int4: `kdtree quantize` of models_dir/demo-target."""
    from python_engine.model.int4_quantize import quantize_checkpoint

    return quantize_checkpoint(models_dir / "demo-target", models_dir / "demo-target-int4", force=True,
                               shard_bytes=INT4_SHARD_BYTES).destination


def export_pair(p: DemoPaths, say=print) -> None:
    """Copy the pair to models_dir (with the tokenizer beside the drafter too, so each folder
    stands alone), check the shipping limits, copy the results to results_dir."""
    for stage in ("target", "drafter"):
        if not stage_done(stage, p):
            raise KdtreeError(f"the {stage} stage has not finished in {p.work_dir}: nothing to export")
    for src, name in ((p.target_dir, "demo-target"), (p.drafter_dir, "demo-drafter")):
        dst = p.models_dir / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
    copy_tokenizer(p.data_dir, p.models_dir / "demo-drafter")  # so the drafter dir stands alone too
    write_int4_target(p.models_dir)
    total = max(check_pair_sizes(p.models_dir, target) for target in TARGETS)
    p.results_dir.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:
        if (p.work_dir / name).exists():
            shutil.copyfile(p.work_dir / name, p.results_dir / name)
    shutil.copyfile(p.data_dir / "corpus-manifest.json", p.results_dir / "corpus-manifest.json")
    say(f"[export] pair in {p.models_dir} ({total / 2**20:.1f} MiB), results in {p.results_dir}")
