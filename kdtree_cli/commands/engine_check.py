"""`kdtree engine-check`: the native engine's smoke check on this machine's GPU (DDTree ==
AR on the demo pair, python_engine/demo/engine_check.py). `kdtree deploy` runs it on GPU hosts
after the tests; the report goes to $KDTREE_RESULTS_DIR (the deploy's results) when set."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer


def engine_check(
    requests: Annotated[int, typer.Option(help="Requests decoded together.", min=1)] = 4,
    tokens: Annotated[int, typer.Option(help="Tokens per request.", min=1)] = 32,
    budget: Annotated[int, typer.Option(help="DDTree node budget.", min=0)] = 32,
    dtype: Annotated[str, typer.Option(help="float32 (exact: DDTree must equal AR) or bfloat16.")] = "float32",
    emulated: Annotated[bool, typer.Option(
        "--emulated", help="Check the emulated engine (lib/libkdtree_engine_emu.so, the same sources on the CPU) "
        "instead of the GPU's: a rehearsal on a host without a GPU, with KDTREE_DEVICE_PROFILE giving the plans "
        "the device's limits.")] = False,
) -> None:
    """Check the native engine on this GPU: DDTree == AR on the demo pair.

    Loads the demo pair, prefills, then decodes a few prompts with DDTree and with AR; every DDTree output must equal its AR output. Exit status 1 otherwise, or without a built engine or a GPU. `kdtree deploy` runs it after the tests.
    """
    from python_engine.demo.engine_check import smoke
    from python_engine.native.multi_gpu import check_split_ready

    if not emulated:
        check_split_ready(int(os.environ.get("KDTREE_GPUS") or 1))  # a deploy's host of several GPUs needs NCCL
    t0 = time.time()
    variant = "emu" if emulated else "gpu"
    passed, failed = smoke(requests, tokens, variant, dtype, budget)
    profile = os.environ.get("KDTREE_DEVICE_PROFILE")
    what = "the emulated engine" + (f" under the {profile} profile" if profile else "") if emulated else "the GPU"
    typer.echo(f"engine-check ({what}): {passed} passed, {failed} failed")
    out = os.environ.get("KDTREE_RESULTS_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "engine-check.json").write_text(json.dumps(
            {"passed": passed, "failed": failed, "requests": requests, "tokens": tokens, "budget": budget,
             "dtype": dtype, "variant": variant, "profile": profile, "seconds": round(time.time() - t0, 3)},
            indent=2) + "\n")
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("engine-check")(engine_check)
