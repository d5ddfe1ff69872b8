"""`kdtree run` above both engines: check the request against the engines, choose one
(python_engine/engine_choice.py), open the metrics stream (and the Prometheus endpoint), and
hand the request to the torch engine's run (python_engine/decode/run_command.py) or the native
engine's (python_engine/native/run_native.py). Neither engine's package imports the other's run.
"""

from __future__ import annotations

from typing import IO

from python_engine.decode.run_command import RunRequest, run_torch_command
from python_engine.engine_choice import choose_engine
from python_engine.errors import KdtreeError
from python_engine.events import EventWriter, open_metrics

AUTO_BUDGET_IS_TORCHS = (
    "--budget auto runs on the torch engine only (--engine torch): the native engine drafts and builds each "
    "round's tree on the GPU at the one budget its request was submitted with (kd_request.budget), and hands no "
    "drafter distribution back to choose a size from; give it a fixed --budget N")


def run_command(req: RunRequest, stdout: IO[str], stderr: IO[str]) -> list:
    """Run the request on the engine it asks for (or the one "auto" picks); the outputs as each
    engine returns them. A KdtreeError is also an "error" event on the metrics stream."""
    exporter = None
    if req.prometheus is not None:
        from python_engine.metrics_exporter import PrometheusExporter

        exporter = PrometheusExporter(req.prometheus)
        print(f"prometheus metrics on :{req.prometheus}/metrics", file=stderr)
    try:
        with open_metrics(req.metrics, stdout) as stream:
            events = EventWriter(stream, listeners=[exporter.observe] if exporter else [])
            try:
                return _run_on_chosen_engine(req, events, stdout, stderr)
            except KdtreeError as exc:
                events.emit("error", message=str(exc))
                raise
    finally:
        if exporter:
            exporter.close()


def _run_on_chosen_engine(req: RunRequest, events: EventWriter, stdout: IO[str], stderr: IO[str]) -> list:
    from python_engine.native.multi_gpu import check_gpu_count

    torch_only = AUTO_BUDGET_IS_TORCHS if req.budget == "auto" and not req.ar else None
    engine, reason = choose_engine(req.engine, req.device, req.gpus, torch_only)
    if req.engine == "auto":
        print(f"engine: {engine} ({reason})", file=stderr)
    check_gpu_count(req.gpus)
    native_only = [name for name, given in (("--load-format dummy", req.load_format != "checkpoint"),
                                            ("--world-size", req.world_size > 1),
                                            ("--gpu-memory-limit", req.gpu_memory_limit_gib is not None)) if given]
    if native_only and engine != "native":
        raise KdtreeError(f"{', '.join(native_only)}: the native engine's (--engine native); the {engine} engine "
                          "reads checkpoints whole into one device's memory")
    if engine == "native":
        from python_engine.native.run_native import run_native_command

        return run_native_command(req, events, stdout, stderr)
    return run_torch_command(req, events, stdout, stderr)
