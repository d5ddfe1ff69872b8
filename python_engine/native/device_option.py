"""The --device option as the native engine reads it: which CUDA device a value names."""

from __future__ import annotations

from python_engine.errors import KdtreeError

ANY_CUDA = (None, "", "auto", "cuda")  # --device values that leave the GPU to the engine: cuda:0


def cuda_device_index(device: str | None) -> int:
    """The CUDA device a --device value names: None, "", auto and cuda are cuda:0, cuda:N is N;
    anything else (cpu, mps, ...) is a KdtreeError naming it."""
    if device in ANY_CUDA:
        return 0
    text = str(device)
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise KdtreeError(f"the native engine runs on CUDA devices (cuda, cuda:N), not {device!r}")
