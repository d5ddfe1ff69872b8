"""`kdtree bench collectives`: what one NCCL collective of the engine's sizes costs on this
machine's GPUs, through torch.distributed (the same NCCL; the way a user would measure it):
the all-reduce of T x 7168 rows after attention and after the MLP (bf16 and float32) and the
all-gather of lm_head's float32 logits parts (Kimi's vocabulary, 163840, split N ways), for
the round sizes of a DDTree round (T = 1 + budget) and a batch. Each case: a warm-up, then
back-to-back calls timed with CUDA events (median of several runs), one process per GPU
with NVLink multicast off. Writes collectives.json and collectives.md: the measured cost
per call that the several-GPU plan (docs/engine.md) scales from.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

HIDDEN = 7168
VOCAB = 163840
ROW_COUNTS = (1, 17, 65, 264)  # AR, budget 16, budget 64, 8 requests x 33 rows
LOGIT_ROWS = (1, 15, 65)  # the target's rows at AR and budget 64; a drafter block of 16
CALLS = 20  # back-to-back calls per timing
RUNS = 5  # timings per case (median)
WARMUP = 5


def _cases(world: int) -> list[dict]:
    cases = [{"op": "all_reduce", "rows": t, "cols": HIDDEN, "dtype": "bfloat16"} for t in ROW_COUNTS]
    cases.append({"op": "all_reduce", "rows": 65, "cols": HIDDEN, "dtype": "float32"})
    cases += [{"op": "all_gather", "rows": t, "cols": VOCAB // world, "dtype": "float32"} for t in LOGIT_ROWS]
    return cases


def _rank(rank, job: dict) -> list[dict]:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank.device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank.rank,
                            world_size=rank.world_size, device_id=torch.device("cuda", rank.device))
    out = []
    try:
        for case in _cases(rank.world_size):
            dtype = getattr(torch, case["dtype"])
            x = torch.randn(case["rows"], case["cols"], device="cuda").to(dtype)
            if case["op"] == "all_reduce":
                def op():
                    dist.all_reduce(x)
            else:
                gathered = torch.empty(rank.world_size * case["rows"], case["cols"], device="cuda", dtype=dtype)

                def op():
                    dist.all_gather_into_tensor(gathered, x)
            for _ in range(WARMUP):
                op()
            times = []
            for _ in range(RUNS):
                dist.barrier()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(CALLS):
                    op()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1000 / CALLS)
            times.sort()
            nbytes = case["rows"] * case["cols"] * x.element_size()
            out.append({**case, "bytes": nbytes, "us": times[len(times) // 2]})
    finally:
        dist.destroy_process_group()
    return out


def run_collectives_bench(gpus: int, out_dir: Path | None) -> dict:
    from kdtree_cli.bench.gpu import git_commit
    from kdtree_cli.bench.provenance import run_record
    from python_engine.project import PROJECT_ROOT
    from python_engine.errors import KdtreeError
    from python_engine.native.multi_gpu import check_gpu_count, launch_ranks

    if gpus < 2:
        raise KdtreeError("kdtree bench collectives needs --gpus N >= 2")
    check_gpu_count(gpus)
    with socket.socket() as s:  # a free port for torch.distributed's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    per_rank = launch_ranks(gpus, _rank, {"port": port}, comm="none")
    # a collective ends together on every rank; report rank 0's timings, the slowest rank's beside
    cases = [{**c, "us_slowest_rank": max(r[i]["us"] for r in per_rank)} for i, c in enumerate(per_rank[0])]
    out = {"run": run_record(gpus), "commit": git_commit(PROJECT_ROOT), "host": socket.gethostname(), "gpus": gpus,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "calls": CALLS, "runs": RUNS, "cases": cases}
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "collectives.json").write_text(json.dumps(out, indent=2) + "\n")
        (out_dir / "collectives.md").write_text(collectives_markdown(out))
    return out


def collectives_markdown(r: dict) -> str:
    lines = [f"# NCCL collectives of the engine's sizes, {r['gpus']} GPUs (commit {r['commit']}, {r['date']})", "",
             f"torch.distributed over NCCL, NVLink multicast off; {r['calls']} back-to-back calls per timing, "
             f"median of {r['runs']}.", "",
             "| collective | rows x cols | dtype | MB per rank | us per call | GB/s (bytes per rank / time) |",
             "|---|---|---|---|---|---|"]
    for c in r["cases"]:
        lines.append(f"| {c['op']} | {c['rows']} x {c['cols']} | {c['dtype']} | {c['bytes'] / 1e6:.3f} | "
                     f"{c['us']:.1f} | {c['bytes'] / c['us'] / 1e3:.1f} |")
    return "\n".join(lines) + "\n"
