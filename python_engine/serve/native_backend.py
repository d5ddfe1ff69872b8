"""The native engine behind the server: requests go in with kd_submit as slots free up,
and each kd_step admits them (prefilling) and runs one batched round of every slot;
a request's new tokens are read back with kd_request_get, and a cancelled or finished
one is released at once so its slot is free for the next."""

from __future__ import annotations

import socket

from python_engine.events import EventWriter
from python_engine.native.engine import FINISHED_STATES, NativeEngine
from python_engine.native.generate import STAGE_KEYS
from python_engine.serve.backend import Progress, SamplingParams



class NativeBackend:
    engine = "native"

    def __init__(self, engine: NativeEngine, events: EventWriter, *, budget: int, block_size: int | None,
                 ar: bool, device: str):
        self.native, self.events = engine, events
        self.ar = ar
        self.budget = 0 if ar else budget
        self.block_size = 1 if ar else (block_size or engine.drafter_config.block_size)
        self.max_slots = engine.options.max_slots
        self.capacity = engine.options.max_tokens
        self._ids: dict[int, int] = {}   # native id -> server rid
        self._sent: dict[int, int] = {}  # native id -> tokens already reported
        self.run_facts = dict(
            engine="native", model=engine.target_dir.name,
            drafter="none" if ar else engine.drafter_dir.name, device=device, host=socket.gethostname(),
            dtype=engine.options.dtype, block_size=self.block_size, budget=self.budget,
            mode="ar" if ar else "ddtree")

    def start(self, rid: int, prompt: list[int], params: SamplingParams) -> None:
        nid = self.native.submit(prompt, params.max_new_tokens, budget=self.budget, block_size=self.block_size,
                                 ar=self.ar, temperature=params.temperature, seed=params.seed,
                                 stop_ids=params.stop_ids)
        self._ids[nid] = rid
        self._sent[nid] = 0

    def step(self) -> list[Progress]:
        report = self.native.step()
        times = {k: round(report.stage_us[k], 1) for k in STAGE_KEYS}
        for rec in report.records:
            if rec.request in self._ids:
                self.events.emit("round", request=self._ids[rec.request], round=rec.round,
                                 accept_len=rec.accept_len, tree_size=rec.tree_size, tree_depth=rec.tree_depth,
                                 times_us=times, tokens=rec.tokens, batch=report.batch, done=rec.done,
                                 host_us=round(report.stage_us["host"], 1))
        out = []
        for nid, rid in list(self._ids.items()):
            info = self.native.request(nid)
            new = info.tokens[self._sent[nid]:]
            done = info.state in FINISHED_STATES
            if new or done:
                out.append(Progress(rid, new, done))
            self._sent[nid] = len(info.tokens)
            if done:
                self._forget(nid)
        return out

    def cancel(self, rid: int) -> None:
        for nid, r in list(self._ids.items()):
            if r == rid:
                self.native.cancel(nid)
                self._forget(nid)

    def _forget(self, nid: int) -> None:
        self.native.release(nid)
        del self._ids[nid], self._sent[nid]

    def close(self) -> None:
        for rid in list(self._ids.values()):
            self.cancel(rid)
        self.native.close()
