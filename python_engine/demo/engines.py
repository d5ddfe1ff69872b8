"""Engines the demo can run on, and the choice among them.

An engine loads a target + drafter pair once and generates token ids, in DDTree or plain AR
mode, emitting metrics events. `select_engine("auto", ...)` takes the first available one
in PREFERENCE: the native CUDA engine when it is built and a GPU is present, else the torch
reference. A later issue provides the native engine by adding a module
`python_engine.native.demo_engine` with `load(target_dir, drafter_dir, device, dtype)`
returning an object with this Engine interface; nothing here changes then.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from python_engine.errors import KdtreeError
from python_engine.events import EventWriter

PREFERENCE = ("native", "torch")
NATIVE_MODULE = "python_engine.native.demo_engine"


class EngineUnavailable(Exception):
    """This engine cannot run here (the reason says why); selection tries the next one."""


@dataclass
class Generated:
    tokens: list[int]
    tau: float  # mean accepted tokens per target forward (1.0 for AR)
    decode_tokens: int  # tokens after the first (the decode phase)
    decode_s: float
    prefill_s: float
    rounds: int

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


class Engine(Protocol):
    name: str  # "native" | "torch"
    device: str
    dtype: str
    eos_ids: tuple[int, ...]

    def generate(self, prompt: list[int], max_tokens: int, *, budget: int, temperature: float, seed: int,
                 ar: bool, stop_ids: tuple[int, ...], events: EventWriter | None) -> Generated:
        ...


class TorchEngine:
    """The PyTorch reference engine (python_engine.model + python_engine.decode)."""

    name = "torch"

    def __init__(self, target_dir: Path, drafter_dir: Path, device: str, dtype: str):
        from python_engine.model.drafter import load_drafter
        from python_engine.model.target_loader import load_target, parse_dtype, resolve_device

        dev = resolve_device(device)
        self.target = load_target(target_dir, dev, parse_dtype(dtype))
        self.drafter = load_drafter(drafter_dir, self.target)
        self.device, self.dtype = str(dev), dtype
        self.eos_ids = tuple(self.target.cfg.eos_token_ids)

    def generate(self, prompt, max_tokens, *, budget, temperature, seed, ar, stop_ids, events=None) -> Generated:
        from python_engine.decode.runner import RunSettings, run_requests

        settings = RunSettings(max_new_tokens=max_tokens, budget=budget, temperature=temperature, seed=seed,
                               ar=ar, stop_ids=tuple(stop_ids))
        gens, summary = run_requests(self.target, None if ar else self.drafter, [prompt], settings,
                                     events or EventWriter(None))
        g = gens[0]
        return Generated(list(g.tokens), 1.0 if ar else g.tau, g.decode_tokens, g.decode_s, g.prefill_s,
                         len(g.rounds))


def _torch_factory(target_dir: Path, drafter_dir: Path, device: str, dtype: str) -> Engine:
    return TorchEngine(target_dir, drafter_dir, device, dtype)


def _native_factory(target_dir: Path, drafter_dir: Path, device: str, dtype: str) -> Engine:
    if device == "cpu":
        raise EngineUnavailable("the native engine needs a CUDA GPU (--device cpu was asked for)")
    module = importlib.import_module(NATIVE_MODULE)
    return module.load(target_dir, drafter_dir, "cuda" if device == "auto" else device, dtype)


FACTORIES: dict[str, Callable[[Path, Path, str, str], Engine]] = {
    "native": _native_factory,
    "torch": _torch_factory,
}


def default_dtype(device: str) -> str:
    """float32 everywhere: the demo pair is tiny, and bf16 rounding can flip a near-tie
    between a tree verify and a one-token AR step, which would blur the identity check."""
    return "float32"


def select_engine(requested: str, target_dir: Path, drafter_dir: Path, device: str = "auto",
                  dtype: str | None = None) -> tuple[Engine, list[str]]:
    """The engine to run and notes on the ones passed over ("native: not built yet")."""
    if requested != "auto" and requested not in FACTORIES:
        raise KdtreeError(f"--engine {requested!r}: choose auto, {', '.join(FACTORIES)}")
    names = PREFERENCE if requested == "auto" else (requested,)
    notes = []
    for name in names:
        try:
            dt = dtype or default_dtype(device)
            return FACTORIES[name](target_dir, drafter_dir, device, dt), notes
        except EngineUnavailable as exc:
            if requested != "auto":
                raise KdtreeError(f"--engine {name}: {exc}") from None
            notes.append(f"{name}: {exc}")
    raise KdtreeError("no engine can run here: " + "; ".join(notes))

