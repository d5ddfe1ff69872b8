"""Whether this machine has a CUDA GPU at all, asked of the NVIDIA driver (libcuda.so.1)
itself: what the native engine's runtime would find, without the engine's library (which
may not be built) and without torch (a CPU build of torch sees no GPU on a machine that has
one). Honours CUDA_VISIBLE_DEVICES, as the driver does."""

from __future__ import annotations

import ctypes
import os

DRIVER_LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100  # cuInit's answer when no device is visible


def no_gpu_reason() -> str | None:
    """Why no CUDA GPU can be used here (a sentence), or None when the driver counts one."""
    try:
        driver = ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return f"this machine has no CUDA GPU (no NVIDIA driver: {DRIVER_LIBRARY} cannot be loaded)"
    status = driver.cuInit(0)
    count = ctypes.c_int(0)
    if status == CUDA_SUCCESS:
        status = driver.cuDeviceGetCount(ctypes.byref(count))
    if status in (CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE) and count.value == 0:
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" with CUDA_VISIBLE_DEVICES={listed!r}" if listed is not None else ""
        return f"this machine has no CUDA GPU (the NVIDIA driver finds none{where})"
    if status != CUDA_SUCCESS:
        return f"the NVIDIA driver does not start here (cuInit/cuDeviceGetCount error {status}): no usable CUDA GPU"
    return None
