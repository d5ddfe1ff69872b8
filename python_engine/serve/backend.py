"""What the engine loop needs of an engine: start a request in a free slot, run one round
of every running request, cancel one. Two engines implement it: torch_backend.py (the
reference; its requests take their rounds in turn) and native_backend.py (the native
engine's kd_submit / kd_step, whose batch rounds all slots at once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 0.0
    seed: int = 0
    stop_ids: tuple[int, ...] = ()


@dataclass
class Progress:
    """A request's tokens from one step: those new since the last step, and whether it ended
    (`error`: the engine failed it)."""
    rid: int
    new_tokens: list[int] = field(default_factory=list)
    done: bool = False
    error: str | None = None


class Backend(Protocol):
    engine: str          # "torch" or "native"
    max_slots: int       # requests decoded at once
    capacity: int        # prompt + generated tokens one slot holds
    run_facts: dict      # the run_start event's engine fields

    def start(self, rid: int, prompt: list[int], params: SamplingParams) -> None: ...

    def step(self) -> list[Progress]: ...

    def cancel(self, rid: int) -> None: ...

    def close(self) -> None: ...
