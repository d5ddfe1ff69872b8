"""The native engine behind the demo's Engine interface (python_engine/demo/engines.py): a
NativeEngine on one GPU; generate() runs one request through the request loop, DDTree or AR."""

from __future__ import annotations

import socket
from pathlib import Path

from python_engine.demo.engines import Generated
from python_engine.events import EventWriter
from python_engine.native.device_option import cuda_device_index
from python_engine.native.engine import NativeEngine, NativeOptions
from python_engine.native.generate import NativeRunSettings, run_native
from python_engine.native.gpu_stats import GpuSampler

DEFAULT_MAX_TOKENS = 4096  # prompt + generated per request; the demo pair's context is 2048
DEFAULT_MAX_BUDGET = 256
TREE_EVERY = 1  # the demo's single request: every round's tree for the monitor


class NativeDemoEngine:
    name = "native"

    def __init__(self, target_dir: Path, drafter_dir: Path, device: str, dtype: str, max_slots: int = 1,
                 max_tokens: int = DEFAULT_MAX_TOKENS, max_budget: int = DEFAULT_MAX_BUDGET):
        index = cuda_device_index(device)
        opts = NativeOptions(dtype=dtype, device=index, max_slots=max_slots, max_tokens=max_tokens,
                             max_budget=max_budget)
        self.engine = NativeEngine(target_dir, drafter_dir, opts, variant="gpu")
        self.device = f"cuda:{index}"
        self.dtype = dtype
        self.eos_ids = tuple(self.engine.target_config.eos_token_ids)
        self.gpus = GpuSampler([index])

    def run_start(self, events: EventWriter, budget: int, temperature: float) -> None:
        d = self.engine.drafter_config
        events.emit("run_start", engine="native", model=self.engine.target_dir.name,
                    drafter=self.engine.drafter_dir.name if self.engine.drafter_dir else "", device=self.device,
                    host=socket.gethostname(), dtype=self.dtype, block_size=d.block_size if d else 1,
                    budget=budget, temperature=temperature)

    def generate(self, prompt, max_tokens, *, budget, temperature, seed, ar, stop_ids, events=None) -> Generated:
        settings = NativeRunSettings(max_new_tokens=max_tokens, budget=budget, temperature=temperature, seed=seed,
                                     ar=ar, stop_ids=tuple(stop_ids), tree_every=0 if ar else TREE_EVERY)
        summary = run_native(self.engine, [list(prompt)], settings, events, gpus=self.gpus)
        r = summary.results[0]
        return Generated(r.tokens, 1.0 if ar else r.tau, r.decode_tokens, r.decode_s, r.prefill_s, r.rounds)

