"""Putting `kdtree serve` together: load the engine (torch or native), the tokenizer and
chat template, the engine loop, the Prometheus metrics and the events hub; then run the
app under uvicorn, where SIGTERM (or Ctrl-C) stops admission, lets running requests finish
for up to --drain-s (then cancels the rest) and exits 0."""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from python_engine.errors import KdtreeError
from python_engine.events import EventWriter
from python_engine.serve import READY_PREFIX
from python_engine.serve.engine_loop import EngineLoop

DEFAULT_MAX_SLOTS = 16
DEFAULT_MAX_QUEUE = 64
DEFAULT_TEMPERATURE = 1.0  # OpenAI's, when the model's generation_config.json names none
DRAIN_MARGIN_S = 2.0  # uvicorn's own shutdown timeout beyond --drain-s (the loop ends requests at drain-s)


@dataclass
class ServeOptions:
    model: Path
    drafter: Path | None = None
    engine: str = "torch"          # torch | native | auto
    native_variant: str = "gpu"    # gpu | emu (the CPU-emulated build: slow, for tests)
    bind: str = "127.0.0.1"
    port: int = 8000
    budget: int = 32
    block_size: int | None = None
    ar: bool = False
    max_slots: int = DEFAULT_MAX_SLOTS
    max_queue: int = DEFAULT_MAX_QUEUE
    max_model_len: int | None = None  # prompt + completion per slot (default: the model's positions, up to 4096)
    device: str | None = None
    dtype: str | None = None
    api_key: str | None = None
    drain_s: float = 30.0
    default_max_tokens: int = 256
    served_model_name: str | None = None
    metrics: str | None = None     # also write the events to this file
    ignore_eos: bool = False
    access_log: bool = False


MAX_DEFAULT_CONTEXT = 4096


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Serving:
    """Everything the app needs, built once; `lifespan` starts and stops the engine loop."""

    def __init__(self, opts: ServeOptions, stderr: IO[str] = sys.stderr):
        from python_engine.decode.prompts import TextCodec
        from python_engine.metrics_exporter import PrometheusExporter
        from python_engine.model.config import load_target_config
        from python_engine.serve.app import ServeState, create_app
        from python_engine.serve.chat_template import load_chat_template
        from python_engine.serve.event_hub import EventHub

        self.opts = opts
        if opts.engine not in ("torch", "native", "auto"):
            raise KdtreeError(f"--engine {opts.engine!r}: choose torch, native or auto")
        if not opts.ar and opts.drafter is None:
            raise KdtreeError("DDTree needs --drafter DIR (or pass --ar for plain autoregressive decoding)")
        if opts.max_slots < 1 or opts.max_queue < 0:
            raise KdtreeError("--max-slots must be >= 1 and --max-queue >= 0")
        cfg = load_target_config(opts.model)
        codec = TextCodec(opts.model)
        if codec.tokenizer is None:
            raise KdtreeError(f"{opts.model}/tokenizer.json is missing: the server needs the model's tokenizer")
        capacity = opts.max_model_len or min(cfg.max_position_embeddings, MAX_DEFAULT_CONTEXT)
        try:
            self._metrics_file = open(opts.metrics, "w", encoding="utf-8") if opts.metrics else None
        except OSError as exc:
            raise KdtreeError(f"--metrics {opts.metrics}: cannot open for writing: {exc.strerror or exc}") from None
        self.exporter = PrometheusExporter(None)
        self.hub = EventHub()
        self.events = EventWriter(self._metrics_file, listeners=[self.exporter.observe, self.hub.publish])
        backend = self._backend(opts, capacity, stderr)
        self.loop = EngineLoop(backend, self.events, opts.max_queue)
        self.state = ServeState(
            loop=self.loop, codec=codec, tokenizer=codec.tokenizer, chat_template=load_chat_template(opts.model),
            model_name=opts.served_model_name or opts.model.name, vocab_size=cfg.vocab_size,
            stop_ids=() if opts.ignore_eos else tuple(cfg.eos_token_ids)[:16],
            default_max_tokens=opts.default_max_tokens, default_temperature=_default_temperature(opts.model),
            exporter=self.exporter, hub=self.hub, api_key=opts.api_key or None, created=int(time.time()))
        self.app = create_app(self.state, lifespan=self.lifespan)

    def _backend(self, opts: ServeOptions, capacity: int, stderr: IO[str]):
        from python_engine.engine_choice import choose_engine

        engine, reason = choose_engine(opts.engine, opts.device)
        if opts.engine == "auto":
            print(f"engine: {engine} ({reason})", file=stderr)
        if engine == "native":
            from python_engine.native.engine import NativeEngine, NativeOptions
            from python_engine.serve.native_backend import NativeBackend

            device = 0 if opts.device in (None, "", "cuda") else int(str(opts.device).removeprefix("cuda:"))
            native = NativeEngine(opts.model, None if opts.ar else opts.drafter,
                                  NativeOptions(dtype=opts.dtype or "bfloat16", device=device, max_slots=opts.max_slots,
                                                max_tokens=capacity, max_budget=0 if opts.ar else opts.budget,
                                                max_block_size=opts.block_size or 0),
                                  variant=opts.native_variant)
            where = "cpu (emulated)" if opts.native_variant == "emu" else f"cuda:{device}"
            return NativeBackend(native, self.events, budget=opts.budget, block_size=opts.block_size, ar=opts.ar,
                                 device=where)
        from python_engine.decode.memory import check_round_fits
        from python_engine.model.drafter import load_drafter
        from python_engine.model.target_loader import load_target, parse_dtype, resolve_device
        from python_engine.serve.torch_backend import TorchBackend

        device = resolve_device(opts.device)
        dtype = parse_dtype(opts.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
        target = load_target(opts.model, device, dtype)
        drafter = None if opts.ar else load_drafter(opts.drafter, target)
        block = 1 if opts.ar else (opts.block_size or drafter.block_size)
        budget = 0 if opts.ar else opts.budget
        heads = 0 if opts.ar else (getattr(drafter, "cfg", None) or target.cfg).num_attention_heads
        check_round_fits(target.cfg, heads, budget=budget, block_size=block, context=capacity,
                         capacity=capacity + budget + 2, elt=target.dtype.itemsize, device=target.device)
        return TorchBackend(target, drafter, self.events, budget=opts.budget, block_size=opts.block_size,
                            max_slots=opts.max_slots, capacity=capacity)

    @asynccontextmanager
    async def lifespan(self, _app):
        import asyncio

        self.hub.bind(asyncio.get_running_loop())
        self.loop.start()
        self.events.emit("run_start", temperature=self.state.default_temperature, requests=0,
                         **self.loop.backend.run_facts)
        try:
            yield
        finally:
            self.close()

    def close(self) -> None:
        self.loop.stop()
        self.exporter.close()
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None

    def uvicorn_server(self):
        """The uvicorn server for this app, draining on SIGTERM and SIGINT."""
        import uvicorn
        from sse_starlette.sse import AppStatus

        # streams end when their requests do (the drain; the events streams when it begins),
        # not the moment a signal arrives
        AppStatus.disable_automatic_graceful_drain()
        config = uvicorn.Config(self.app, host=self.opts.bind, port=self.opts.port, log_level="info",
                                access_log=self.opts.access_log,
                                timeout_graceful_shutdown=self.opts.drain_s + DRAIN_MARGIN_S)
        loop, drain_s = self.loop, self.opts.drain_s

        ready_line = f"{READY_PREFIX} http://{self.opts.bind}:{self.opts.port}"

        class DrainingServer(uvicorn.Server):
            async def startup(self, sockets=None) -> None:
                await super().startup(sockets)
                if self.started:
                    print(ready_line, file=sys.stderr, flush=True)

            def handle_exit(self, sig, frame) -> None:
                loop.begin_drain(drain_s)
                super().handle_exit(sig, frame)
                self._captured_signals.clear()  # drained: exit 0 rather than re-raise the signal

        return DrainingServer(config)


def _default_temperature(model_dir: Path) -> float:
    path = Path(model_dir) / "generation_config.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("temperature")
    except (OSError, ValueError):
        return DEFAULT_TEMPERATURE
    return float(value) if isinstance(value, (int, float)) and value >= 0 else DEFAULT_TEMPERATURE


def serve(opts: ServeOptions, stderr: IO[str] = sys.stderr) -> None:
    if not _is_loopback(opts.bind) and not opts.api_key:
        print(f"warning: serving on {opts.bind} without an API key: anyone who can reach this port can use the "
              "model (set --api-key or KDTREE_API_KEY)", file=stderr)
    _check_port_free(opts.bind, opts.port)
    serving = Serving(opts, stderr)
    backend = serving.loop.backend
    print(f"serving {serving.state.model_name} ({backend.engine} engine, {backend.run_facts['mode']}, "
          f"{backend.max_slots} slots of {backend.capacity} tokens) on http://{opts.bind}:{opts.port}/v1",
          file=stderr, flush=True)
    serving.uvicorn_server().run()


def _check_port_free(host: str, port: int) -> None:
    """Fail before the model loads when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise KdtreeError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port)") from None
