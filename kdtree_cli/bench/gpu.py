"""The GPU a bench runs on: whether there is one, and the facts recorded with each result
(device, driver, clocks, toolkit, torch, commit)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from python_engine.errors import KdtreeError


class NoGpuError(KdtreeError):
    """A command that needs a CUDA GPU found none."""


def require_gpu(what: str) -> None:
    """Raise NoGpuError naming `what` when torch sees no CUDA device."""
    try:
        import torch
    except ImportError as exc:
        raise NoGpuError(f"{what} needs torch with CUDA; torch is not installed ({exc})") from exc
    if not torch.cuda.is_available():
        raise NoGpuError(
            f"{what} needs a CUDA GPU and this machine has none visible to torch "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}). Run it on a GPU "
            "machine, or on a deployed host with --host HOST.")


def device_slug(name: str) -> str:
    """A folder name for a device: 'NVIDIA H200' -> 'h200', 'NVIDIA RTX PRO 6000 Blackwell
    Server Edition' -> 'rtx-pro-6000'."""
    s = name.lower().replace("nvidia", "").strip()
    known = [("h200", "h200"), ("h100", "h100"), ("b200", "b200"), ("rtx pro 6000", "rtx-pro-6000"),
             ("a100", "a100"), ("l40s", "l40s")]
    for needle, slug in known:
        if needle in s:
            return slug
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def git_commit(root: Path) -> str:
    """HEAD's hash (+ '-dirty'), $KDTREE_COMMIT when set, or 'unknown' outside a checkout."""
    if os.environ.get("KDTREE_COMMIT"):
        return os.environ["KDTREE_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown (no git checkout)"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (git not runnable)"


def nvml_clocks(index: int = 0) -> dict:
    """SM / memory clocks now and at most, power, temperature (NVML); {} without pynvml."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "pynvml not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        out = {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "mem_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "driver": pynvml.nvmlSystemGetDriverVersion(),
        }
        pynvml.nvmlShutdown()
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in out.items()}
    except Exception as exc:  # NVMLError, or an older binding without one of the calls: record why
        return {"nvml": f"{type(exc).__name__}: {exc}"}


def device_facts(root: Path) -> dict:
    """What a result was measured on. Needs a GPU (call require_gpu first)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "device_slug": device_slug(props.name),
        "compute_capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "memory_gb": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "host": platform.node(),
        "python": platform.python_version(),
        "commit": git_commit(root),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clocks_start": nvml_clocks(0),
    }
