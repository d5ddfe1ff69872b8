"""`kdtree bench moe`: one Kimi K2.6-shaped MoE layer's routed experts (384 experts of
7168 x 2048, top-8, random routing) at n tokens, timed three ways in one run:

  int4   the W4A16 grouped GEMM (csrc/kernels/moe_gemm_w4a16.cu): fused gate/up + down
  bf16   our bf16 grouped GEMM (csrc/kernels/moe_gemm.cu), the same two launches
  torch  torch._grouped_mm (bf16): gate/up as one GEMM, silu * up, down

next to each format's floor: the bytes of the distinct experts the routing activates over the
device-to-device copy bandwidth measured in the same run (csrc/bench/bench_moe.cu runs the
first two and the copy; this module writes the routing, runs it, times torch on the same
routing and writes results/<device>/bench/moe.{json,md}). CUDA-event timing, medians.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from kdtree_cli.bench.gpu import device_slug, git_commit
from kdtree_cli.bench.provenance import run_record
from kdtree_cli.bench.timing import Timing, time_cuda
from python_engine.errors import KdtreeError

from python_engine.project import PROJECT_ROOT as REPO_ROOT  # noqa: E402
PROGRAM = "bench_moe"


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer's routed experts: Kimi K2.6's by default."""

    experts: int = 384
    hidden: int = 7168
    inter: int = 2048  # moe_intermediate_size
    topk: int = 8


DEFAULT_TOKENS = (1, 8, 16, 64, 128)
# routings per n, used in turn: at n = 1 one routing's INT4 experts (~200 MB) already pass the
# ~50 MB L2, so consecutive runs never find their weights there
DEFAULT_SETS = 4
# the goals: INT4 within 1.3x of its floor at every n, and at least 3x
# faster than torch's bf16 grouped GEMM for n <= 64
GOAL_FLOOR_RATIO = 1.3
GOAL_TORCH_SPEEDUP = 3.0
GOAL_TORCH_MAX_TOKENS = 64


class NoGpuError(KdtreeError):
    """The command needs a CUDA GPU and torch sees none."""


def require_gpu() -> None:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise NoGpuError(f"kdtree bench moe needs a GPU and torch with CUDA; torch is missing ({exc})") from exc
    if not torch.cuda.is_available():
        raise NoGpuError(
            "kdtree bench moe needs a GPU: torch sees no CUDA device here "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}). Run it on a GPU machine.")


def random_routing(rng: np.random.Generator, tokens: int, experts: int, topk: int) -> np.ndarray:
    """int32 [tokens, topk]: each token's top-k distinct experts, uniformly at random."""
    scores = rng.random((tokens, experts))
    return np.argsort(scores, axis=1)[:, :topk].astype(np.int32)


def routing_tensors(shape: MoeShape, tokens: tuple[int, ...], sets: int, seed: int) -> dict[str, np.ndarray]:
    """What bench_moe reads (its header comment has the names)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {
        "experts": np.int64(shape.experts), "hidden": np.int64(shape.hidden), "inter": np.int64(shape.inter),
        "topk": np.int64(shape.topk), "sets": np.int64(sets), "tokens": np.array(tokens, dtype=np.int64),
    }
    for n in tokens:
        for s in range(sets):
            out[f"n{n}.s{s}.topk_ids"] = random_routing(rng, n, shape.experts, shape.topk)
    return out


def build_program(console) -> Path:
    """`kdtree build bench_moe` for the visible GPU; the program's path."""
    from kdtree_cli.native_build import driver

    outcome = driver.build(driver.BuildRequest(targets=(PROGRAM,)), console=console)
    return outcome.configured.config.build_dir / "bin" / PROGRAM


def run_native(program: Path, routing: Path, reps: int, log: Callable[[str], None]) -> list[dict]:
    """bench_moe's JSON records; its progress lines go to `log`."""
    if not program.is_file():
        raise KdtreeError(f"{program} does not exist: build it with `kdtree build {PROGRAM}` (or drop --no-build)")
    proc = subprocess.Popen([str(program), "--routing", str(routing), "--reps", str(reps)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    records = []
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        if line.strip():
            records.append(json.loads(line))
    err = proc.stderr.read()
    for line in err.splitlines():
        log(line)
    if proc.wait() != 0:
        raise KdtreeError(f"{program} failed (exit {proc.returncode}): {err.strip().splitlines()[-1] if err.strip() else 'no message'}")
    return records


def grouped_rows(x, topk_ids: np.ndarray, experts: int):
    """x rows in expert order and the int32 end offsets torch._grouped_mm takes (what moe_group
    makes for our kernels: an expert's rows in token order)."""
    import torch

    ids = torch.from_numpy(topk_ids).to(x.device).long().reshape(-1)
    order = torch.argsort(ids, stable=True)
    offs = torch.cumsum(torch.bincount(ids, minlength=experts), 0).to(torch.int32)
    return x[order // topk_ids.shape[1]].contiguous(), offs


def torch_moe_layer(xg, offs, w_gate_up, w_down):
    """The routed experts through torch._grouped_mm (bf16): gate and up as one GEMM (w_gate_up
    [E, 2 inter, hidden], nn.Linear layout), silu(gate) * up, then down ([E, hidden, inter])."""
    import torch

    inter = w_down.shape[2]
    gu = torch._grouped_mm(xg, w_gate_up.transpose(-2, -1), offs=offs)
    act = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
    return torch._grouped_mm(act, w_down.transpose(-2, -1), offs=offs)


def time_torch_grouped_mm(shape: MoeShape, routing: dict[str, np.ndarray], tokens: tuple[int, ...], sets: int,
                          reps: int, log: Callable[[str], None]) -> dict[int, Timing]:
    """torch_moe_layer on the same routings, x rows already grouped (the gather is not timed)."""
    import torch

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(7)

    def weights(*size: int) -> torch.Tensor:  # ~U(-0.02, 0.02) as bench_moe's, drawn in bf16 (no float32 copy)
        return torch.empty(*size, dtype=torch.bfloat16, device=dev).uniform_(-0.02, 0.02, generator=gen)

    w_gate_up = weights(shape.experts, 2 * shape.inter, shape.hidden)
    w_down = weights(shape.experts, shape.hidden, shape.inter)
    out: dict[int, Timing] = {}
    for n in tokens:
        x = torch.empty(n, shape.hidden, dtype=torch.bfloat16, device=dev).uniform_(-1, 1, generator=gen)
        groups = [grouped_rows(x, routing[f"n{n}.s{s}.topk_ids"], shape.experts) for s in range(sets)]
        out[n] = time_cuda(lambda i, g=groups: torch_moe_layer(*g[i % sets], w_gate_up, w_down), reps)
        log(f"torch _grouped_mm: n={n} {out[n].ms:.4f} ms")
    del w_gate_up, w_down
    torch.cuda.empty_cache()
    return out


@dataclass
class Row:
    """One n: times, floors and ratios (ms)."""

    tokens: int
    distinct_experts: float
    max_rows_per_expert: int
    int4_ms: float
    bf16_ms: float
    torch_ms: float | None
    int4_floor_ms: float
    bf16_floor_ms: float
    extra: dict = field(default_factory=dict)  # per-GEMM times and the forced row tiles

    @property
    def int4_over_floor(self) -> float:
        return self.int4_ms / self.int4_floor_ms

    @property
    def torch_over_int4(self) -> float | None:
        return None if self.torch_ms is None else self.torch_ms / self.int4_ms


def compose(records: list[dict], torch_times: dict[int, Timing] | None, device: str) -> tuple[dict, list[Row]]:
    """bench_moe's records + torch's timings on `device` -> (facts, one Row per n)."""
    shape = next((r for r in records if r["kind"] == "shape"), None)
    copy = next((r for r in records if r["kind"] == "copy"), None)
    if shape is None or copy is None:
        raise KdtreeError("bench_moe printed no shape or copy record: its output is incomplete")
    bytes_per_ms = copy["gbps"] * 1e6
    by_n: dict[int, dict[str, dict]] = {}
    for r in records:
        if r["kind"] == "moe":
            by_n.setdefault(r["tokens"], {})[r["impl"]] = r
    rows = []
    for n, impls in sorted(by_n.items()):
        if "int4" not in impls or "bf16" not in impls:
            raise KdtreeError(f"bench_moe printed no int4 / bf16 record for n={n}")
        distinct = impls["int4"]["distinct_experts"]
        extra = {impl: {k: r[k] for k in ("ms", "gate_up_ms", "down_ms")} for impl, r in impls.items()}
        rows.append(Row(
            tokens=n, distinct_experts=distinct, max_rows_per_expert=impls["int4"]["max_rows_per_expert"],
            int4_ms=impls["int4"]["ms"], bf16_ms=impls["bf16"]["ms"],
            torch_ms=None if torch_times is None or n not in torch_times else torch_times[n].ms,
            int4_floor_ms=distinct * shape["int4_expert_bytes"] / bytes_per_ms,
            bf16_floor_ms=distinct * shape["bf16_expert_bytes"] / bytes_per_ms, extra=extra))
    facts = {"device": device, "copy_gbps": copy["gbps"],
             "shape": {k: shape[k] for k in ("experts", "hidden", "inter", "topk")},
             "int4_expert_bytes": shape["int4_expert_bytes"], "bf16_expert_bytes": shape["bf16_expert_bytes"]}
    return facts, rows


def goals(rows: list[Row]) -> dict[str, bool | None]:
    floor_ok = all(r.int4_over_floor <= GOAL_FLOOR_RATIO for r in rows)
    speedups = [r.torch_over_int4 for r in rows if r.tokens <= GOAL_TORCH_MAX_TOKENS]
    torch_ok = None if any(s is None for s in speedups) else all(s >= GOAL_TORCH_SPEEDUP for s in speedups)
    return {f"int4 <= {GOAL_FLOOR_RATIO}x floor at every n": floor_ok,
            f"int4 >= {GOAL_TORCH_SPEEDUP}x faster than torch bf16 at n <= {GOAL_TORCH_MAX_TOKENS}": torch_ok}


def markdown(facts: dict, rows: list[Row], meta: dict) -> str:
    s = facts["shape"]
    lines = [
        f"# MoE layer: {s['experts']} experts of {s['inter']} x {s['hidden']}, top-{s['topk']}, random routing",
        "",
        f"{facts['device']}; copy bandwidth {facts['copy_gbps']:.0f} GB/s (read + write, measured in this run); "
        f"commit {meta['commit']}; {meta['date']}; torch {meta['torch']}.",
        "Times in ms (CUDA events, medians; each run queued behind a spin kernel, so GPU time without the "
        "host's launch cost); floor = distinct active experts' bytes / copy bandwidth.",
        "",
        "| n | experts | INT4 | INT4 floor | INT4/floor | bf16 (ours) | bf16 floor | bf16/floor | torch bf16 | torch/floor | torch/INT4 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = "n/a" if r.torch_ms is None else f"{r.torch_ms:.4f}"
        tf = "n/a" if r.torch_ms is None else f"{r.torch_ms / r.bf16_floor_ms:.2f}"
        ti = "n/a" if r.torch_over_int4 is None else f"{r.torch_over_int4:.2f}"
        lines.append(f"| {r.tokens} | {r.distinct_experts:.1f} | {r.int4_ms:.4f} | {r.int4_floor_ms:.4f} | "
                     f"{r.int4_over_floor:.2f} | {r.bf16_ms:.4f} | {r.bf16_floor_ms:.4f} | "
                     f"{r.bf16_ms / r.bf16_floor_ms:.2f} | {t} | {tf} | {ti} |")
    lines += ["", "Per GEMM (ms: layer = gate/up + down) and the INT4 row tiles forced:", "",
              "| n | impl | layer | gate/up | down |", "|---|---|---|---|---|"]
    for r in rows:
        for impl, e in r.extra.items():
            lines.append(f"| {r.tokens} | {impl} | {e['ms']:.4f} | {e['gate_up_ms']:.4f} | {e['down_ms']:.4f} |")
    lines += ["", "Goals:", ""]
    for goal, ok in goals(rows).items():
        lines.append(f"- {goal}: {'met' if ok else 'not met' if ok is not None else 'not measured'}")
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path, facts: dict, rows: list[Row], meta: dict) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {"run": run_record(), "meta": meta, **facts, "goals": goals(rows),
            "rows": [{**r.__dict__, "int4_over_floor": r.int4_over_floor, "torch_over_int4": r.torch_over_int4}
                     for r in rows]}
    json_path, md_path = out_dir / "moe.json", out_dir / "moe.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown(facts, rows, meta))
    return json_path, md_path


def run(tokens: tuple[int, ...], sets: int, reps: int, seed: int, out_dir: Path | None, build: bool,
        shape: MoeShape, console) -> tuple[Path, Path, list[Row]]:
    """The whole bench; returns the result files and the rows."""
    require_gpu()
    import torch

    from python_engine.kdtr import write_kdtr

    log = lambda line: console.print(f"[dim]{line}[/]", highlight=False)  # noqa: E731
    program = build_program(console) if build else REPO_ROOT / "build" / "release" / "bin" / PROGRAM
    routing = routing_tensors(shape, tokens, sets, seed)
    with tempfile.TemporaryDirectory(prefix="kdtree-bench-moe-") as tmp:
        path = write_kdtr(Path(tmp) / "routing.kdtr", routing)
        records = run_native(program, path, reps, log)
    try:
        torch_times = time_torch_grouped_mm(shape, routing, tokens, sets, reps, log)
        torch_error = None
    except (RuntimeError, AttributeError) as exc:  # an unsupported GPU or torch: report, keep ours
        torch_times, torch_error = None, f"{type(exc).__name__}: {exc}"
        log(f"torch _grouped_mm failed: {torch_error}")
    facts, rows = compose(records, torch_times, torch.cuda.get_device_name(0))
    meta = {"commit": git_commit(REPO_ROOT), "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch": torch.__version__, "torch_cuda": torch.version.cuda, "seed": seed, "sets": sets, "reps": reps,
            "torch_error": torch_error}
    out_dir = out_dir or REPO_ROOT / "results" / device_slug(facts["device"]) / "bench"
    json_path, md_path = write_results(out_dir, facts, rows, meta)
    return json_path, md_path, rows
