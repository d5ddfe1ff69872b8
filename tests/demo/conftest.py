"""A tiny demo pair made by the smoke recipe (seconds on a CPU), shared by the demo tests
until and besides the trained pair committed under refs/models/."""

from __future__ import annotations

from dataclasses import replace

import pytest

from python_engine.train.recipe import smoke_recipe
from python_engine.train.stages import DemoPaths, run_stages


@pytest.fixture(scope="session")
def smoke_pair(tmp_path_factory) -> DemoPaths:
    """corpus (60 stdlib files) -> tokenizer -> target -> drafter -> export, 2 steps each."""
    root = tmp_path_factory.mktemp("smoke-pair")
    recipe = smoke_recipe().with_steps(2, 2)
    recipe = replace(recipe, drafter_training=replace(recipe.drafter_training, gen_prompts=4, gen_batch=4))
    paths = DemoPaths(root / "data", root / "work", root / "models", root / "results")
    run_stages(["corpus", "tokenizer", "target", "drafter", "export"], recipe, paths, "cpu", say=lambda _: None)
    return paths
