"""Engines the demo can run on: an engine loads a target + drafter pair once and generates
token ids, in DDTree or plain AR mode, emitting metrics events. `select_engine` loads the one
python_engine.engine_choice picks: the torch reference here, the native CUDA engine in
native_engine.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from python_engine.engine_choice import choose_engine
from python_engine.events import EventWriter


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


def default_dtype(device: str) -> str:
    """float32 everywhere: the demo pair is tiny, and bf16 rounding can flip a near-tie
    between a tree verify and a one-token AR step, which would blur the identity check."""
    return "float32"


def select_engine(requested: str, target_dir: Path, drafter_dir: Path, device: str = "auto",
                  dtype: str | None = None) -> tuple[Engine, list[str]]:
    """The engine to run, loaded, and a note on the one passed over ("native: not built ...")."""
    name, reason = choose_engine(requested, device)
    notes = [f"native: {reason}"] if requested == "auto" and name == "torch" else []
    dtype = dtype or default_dtype(device)
    if name == "native":
        from python_engine.demo.native_engine import NativeDemoEngine

        return NativeDemoEngine(Path(target_dir), Path(drafter_dir), device, dtype), notes
    return TorchEngine(target_dir, drafter_dir, device, dtype), notes
