"""The torch reference engine behind the server. Its decode loops are generators
(`ar_steps`, `ddtree_steps`: one yield per round), so each running request keeps its own
caches and a step runs one round of every running request in turn: the same code, the
same tokens as `kdtree run`, with requests joining and leaving between rounds."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch

from python_engine.decode.ar import ar_steps
from python_engine.decode.ddtree_loop import ddtree_steps
from python_engine.decode.result import Generation, RoundInfo
from python_engine.events import EventWriter
from python_engine.model.drafter_base import Drafter
from python_engine.model.target import TargetModel
from python_engine.serve.backend import Progress, SamplingParams


@dataclass
class _Running:
    steps: object  # the decode generator
    gen: Generation | None = None
    sent: int = 0  # tokens already reported
    last_round: RoundInfo | None = None  # the round the last step ran (none for the prefill)


class TorchBackend:
    engine = "torch"

    def __init__(self, target: TargetModel, drafter: Drafter | None, events: EventWriter, *, budget: int,
                 block_size: int | None, max_slots: int, capacity: int):
        self.target, self.drafter, self.events = target, drafter, events
        self.ar = drafter is None
        self.budget = 0 if self.ar else budget
        self.block_size = 1 if self.ar else (block_size or drafter.block_size)
        self.max_slots, self.capacity = max_slots, capacity
        self._running: dict[int, _Running] = {}
        self.run_facts = dict(
            engine="torch", model=target.name, drafter="none" if self.ar else drafter.name,
            device=str(target.device), host=socket.gethostname(), dtype=str(target.dtype).removeprefix("torch."),
            block_size=self.block_size, budget=self.budget, mode="ar" if self.ar else "ddtree")

    def start(self, rid: int, prompt: list[int], params: SamplingParams) -> None:
        generator = torch.Generator().manual_seed(params.seed)

        def round_done(info: RoundInfo) -> None:
            self._running[rid].last_round = info

        common = dict(max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                      generator=generator, stop_ids=params.stop_ids, on_round=round_done)
        if self.ar:
            steps = ar_steps(self.target, prompt, **common)
        else:
            steps = ddtree_steps(self.target, self.drafter, prompt, budget=self.budget,
                                 block_size=self.block_size, **common)
        self._running[rid] = _Running(steps)

    def step(self) -> list[Progress]:
        out = []
        for rid, run in list(self._running.items()):
            done, error = False, None
            try:
                run.gen = next(run.steps)
            except StopIteration as stop:
                run.gen, done = stop.value, True
            except Exception as exc:  # one request's failure ends it, not the server
                done, error = True, f"{type(exc).__name__}: {exc}"
            tokens = run.gen.tokens if run.gen is not None else []
            if run.last_round is not None:
                info, run.last_round = run.last_round, None
                self.events.emit("round", request=rid, round=info.index, accept_len=info.accept_len,
                                 tree_size=info.tree_size, tree_depth=info.tree_depth, times_us=info.times_us,
                                 tokens=info.tokens, batch=len(self._running), done=done)
            out.append(Progress(rid, list(tokens[run.sent:]), done, error))
            run.sent = len(tokens)
            if done:
                self._drop(rid)
        return out

    def cancel(self, rid: int) -> None:
        self._drop(rid)

    def _drop(self, rid: int) -> None:
        run = self._running.pop(rid, None)
        if run is not None:
            run.steps.close()

    def close(self) -> None:
        for rid in list(self._running):
            self._drop(rid)
