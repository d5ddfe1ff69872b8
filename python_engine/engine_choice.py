"""Which engine runs a request, and why: the torch reference (python_engine.model and
python_engine.decode, on any torch device) or the native CUDA engine (python_engine.native,
the library `kdtree build` makes, on a CUDA GPU).

Every command that takes --engine asks `choose_engine`, so that "auto" means one thing
everywhere: the native engine when its library is built and the CUDA device answers it, else
torch. An explicit choice is taken as asked, once the device can hold it; what the engine
itself then finds wrong (no library, no GPU) it says when it loads.
"""

from __future__ import annotations

from typing import NamedTuple

from python_engine.errors import KdtreeError

ENGINES = ("native", "torch")  # auto's order: the first one that can run here
CHOICES = ("auto", *ENGINES)


class EngineChoice(NamedTuple):
    name: str  # "native" | "torch"
    reason: str  # why this one, for the user: "asked for", or what ruled the other out


def native_unavailable(device: str | None = None) -> str | None:
    """Why the native engine cannot run on `device` here (a sentence), or None when it can:
    the device must be a CUDA one, the machine must have a CUDA GPU (asked first: building
    the library is no help without one), the library built, and that device must answer it."""
    from python_engine.native import cuda_driver
    from python_engine.native.device_option import cuda_device_index
    from python_engine.native.engine import device_memory
    from python_engine.native.library import library_path

    try:
        index = cuda_device_index(device)
    except KdtreeError as exc:
        return str(exc)
    no_gpu = cuda_driver.no_gpu_reason()
    if no_gpu:
        return f"{no_gpu}; the native engine runs on one"
    path = library_path("gpu")
    if not path.is_file():
        return f"the native engine is not built ({path} is missing: run `kdtree build`)"
    try:
        device_memory(index)
    except KdtreeError as exc:
        return f"the native engine gets no answer from cuda:{index} ({exc})"
    return None


def choose_engine(requested: str, device: str | None = None, gpus: int = 1,
                  torch_only: str | None = None) -> EngineChoice:
    """The engine for `--engine requested` on `device` with `--gpus gpus`, and why.

    torch_only: why this request can run on the torch engine alone (a feature the native
    engine lacks), or None. Raises KdtreeError, saying what to change, when the request
    cannot run as asked."""
    if requested not in CHOICES:
        raise KdtreeError(f"--engine {requested!r}: choose torch, native or auto")
    if gpus > 1:
        if requested == "torch":
            raise KdtreeError(f"--gpus {gpus} needs --engine native: the torch engine runs on one device")
        if torch_only:
            raise KdtreeError(torch_only)
        return EngineChoice("native", f"--gpus {gpus}: only the native engine splits a model over GPUs")
    if requested == "torch":
        return EngineChoice("torch", "asked for (--engine torch)")
    if requested == "native":
        from python_engine.native.device_option import cuda_device_index

        if torch_only:
            raise KdtreeError(torch_only)
        try:
            cuda_device_index(device)
        except KdtreeError as exc:
            raise KdtreeError(f"--engine native: {exc}") from None
        return EngineChoice("native", "asked for (--engine native)")
    why_not = torch_only or native_unavailable(device)
    if why_not:
        return EngineChoice("torch", why_not)
    return EngineChoice("native", "it is built and the CUDA device answers it")
