"""Device choice and TF32 in `kdtree train-demo`: one device resolver for the whole
project (model/target_loader.resolve_device), and TF32 switched on only inside the
training stages, never left on for whatever runs next in the process (the engine's
float32 evaluation, a test)."""

from __future__ import annotations

import torch

from python_engine.train import stages
from python_engine.train.recipe import get_recipe


def test_tf32_is_on_only_inside_the_training_stages(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    seen = {}

    def record(name):
        def stage(recipe, p, device, **_):
            seen[name] = (device, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        return stage

    for name in ("target", "drafter", "eval"):
        monkeypatch.setitem(stages.STAGE_FUNCTIONS, name, record(name))
    monkeypatch.setattr(stages, "check_data", lambda *a, **k: None)
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        paths = stages.DemoPaths(tmp_path / "data", tmp_path / "work", tmp_path / "models", tmp_path / "results")
        stages.run_stages(["target", "drafter", "eval"], get_recipe("smoke"), paths, "cuda", say=lambda s: None)
        after = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert seen["target"] == (torch.device("cuda"), True, True)
    assert seen["drafter"] == (torch.device("cuda"), True, True)
    assert seen["eval"] == (torch.device("cuda"), False, False)
    assert after == (False, False)  # nothing left switched on


def test_one_device_resolver():
    from python_engine.model.target_loader import resolve_device

    assert not hasattr(stages, "resolve_device") or stages.resolve_device is resolve_device
