"""`kdtree bench moe` without a GPU: it refuses clearly; its routings, its torch baseline's math
and its report (floors, ratios, goals, files) on synthetic records. The native half
(csrc/bench/bench_moe.cu) runs on the SIMT emulator in tests/kernels/test_moe_w4a16_emulated.py."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from kdtree_cli.bench import moe


def test_refuses_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the refusal cannot be seen here")
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "bench", "moe", "--no-build"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs a GPU" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_routing_picks_distinct_experts_per_token(seed):
    rng = np.random.default_rng(seed)
    ids = moe.random_routing(rng, 4000, 384, 8)
    assert ids.shape == (4000, 8) and ids.dtype == np.int32
    assert ids.min() >= 0 and ids.max() < 384
    assert all(len(set(row)) == 8 for row in ids.tolist())
    # Uniform: each expert's count is ~Binomial(4000, 8/384), mean 83.3, sd 9.0. The bounds (31..149)
    # sit 5.8 and 7.4 sd out: a correct routing fails them with probability < 2e-8 over all 384 experts;
    # a routing that favours or never picks some experts falls outside them.
    counts = np.bincount(ids.reshape(-1), minlength=384)
    assert counts.min() > 30 and counts.max() < 150, (counts.min(), counts.max())


def test_torch_layer_is_the_routed_experts(seed):
    """grouped_rows + torch_moe_layer (CPU here) against a per-token, per-expert loop."""
    gen = torch.Generator().manual_seed(seed)
    experts, hidden, inter, topk, tokens = 6, 32, 16, 2, 9
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen).to(torch.bfloat16)
    w_down = torch.randn(experts, hidden, inter, generator=gen).to(torch.bfloat16)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    ids = moe.random_routing(np.random.default_rng(seed), tokens, experts, topk)
    xg, offs = moe.grouped_rows(x, ids, experts)
    got = moe.torch_moe_layer(xg, offs, w_gate_up, w_down).double()
    order = np.argsort(ids.reshape(-1), kind="stable")
    for row, pair in enumerate(order):
        t, e = pair // topk, ids.reshape(-1)[pair]
        xt = x[t].double()
        g, u = w_gate_up[e, :inter].double() @ xt, w_gate_up[e, inter:].double() @ xt
        want = w_down[e].double() @ (torch.nn.functional.silu(g) * u)
        assert torch.allclose(got[row], want, rtol=0.05, atol=0.05 * want.abs().max().item()), row


def _records(device_gbps: float, int4_ms: tuple[float, float] = (0.06, 2.8)) -> list[dict]:
    shape = {"kind": "shape", "experts": 384, "hidden": 7168, "inter": 2048, "topk": 8,
             "int4_expert_bytes": 24772608, "bf16_expert_bytes": 88080384}
    recs = [shape, {"kind": "copy", "bytes": 1 << 31, "ms": 1.0, "ms_p10": 1.0, "ms_p90": 1.0, "gbps": device_gbps}]
    for n, distinct, int4, bf16_ms in ((1, 8.0, int4_ms[0], 0.5), (64, 284.5, int4_ms[1], 20.0)):
        for impl, ms in (("int4", int4), ("int4_tile8", int4 * 1.1), ("bf16", bf16_ms)):
            recs.append({"kind": "moe", "impl": impl, "tokens": n, "rows": 8 * n, "distinct_experts": distinct,
                         "max_rows_per_expert": 3, "ms": ms, "ms_p10": ms, "ms_p90": ms, "gate_up_ms": ms * 0.6,
                         "down_ms": ms * 0.4, "reps": 20})
    return recs


def test_report_floors_ratios_and_goals(tmp_path):
    torch_times = {1: moe.Timing(0.29, 0.28, 0.3, 20), 64: moe.Timing(7.8, 7.7, 7.9, 20)}
    facts, rows = moe.compose(_records(4400.0), torch_times, "NVIDIA H200")
    assert [r.tokens for r in rows] == [1, 64]
    bytes_per_ms = 4400.0 * 1e6
    assert rows[0].int4_floor_ms == pytest.approx(8.0 * 24772608 / bytes_per_ms)
    assert rows[1].bf16_floor_ms == pytest.approx(284.5 * 88080384 / bytes_per_ms)
    assert rows[0].int4_over_floor == pytest.approx(0.06 / (8.0 * 24772608 / bytes_per_ms))
    assert rows[1].torch_over_int4 == pytest.approx(7.8 / 2.8)
    # n=1: 0.06 ms over a 0.045 ms floor (1.33x > 1.3x); n=64: torch 7.8 / 2.8 = 2.8x < 3x
    assert list(moe.goals(rows).values()) == [False, False]
    _, fast = moe.compose(_records(4400.0, int4_ms=(0.05, 2.0)), torch_times, "NVIDIA H200")
    assert list(moe.goals(fast).values()) == [True, True]  # 1.11x and 1.25x the floors; 5.8x and 3.9x torch
    meta = {"commit": "abc", "date": "2026-01-01T00:00:00Z", "torch": "2.11", "seed": 0}
    json_path, md_path = moe.write_results(tmp_path / "out", facts, rows, meta)
    data = json.loads(json_path.read_text())
    assert data["device"] == "NVIDIA H200" and len(data["rows"]) == 2
    assert data["rows"][1]["torch_over_int4"] == pytest.approx(7.8 / 2.8)
    assert data["goals"] == {k: False for k in moe.goals(rows)}
    text = md_path.read_text()
    assert "| 64 | 284.5 | 2.8000 |" in text and "int4_tile8" in text and "4400 GB/s" in text


def test_report_without_torch_says_not_measured(tmp_path):
    facts, rows = moe.compose(_records(4000.0), None, "NVIDIA H200")
    assert all(r.torch_ms is None for r in rows)
    assert list(moe.goals(rows).values())[1] is None
    assert "not measured" in moe.markdown(facts, rows, {"commit": "x", "date": "d", "torch": "t"})


def test_incomplete_native_output_is_an_error():
    with pytest.raises(Exception, match="no shape or copy record"):
        moe.compose([r for r in _records(4000.0) if r["kind"] != "copy"], None, "gpu")
    with pytest.raises(Exception, match="no int4 / bf16 record for n=1"):
        moe.compose([r for r in _records(4000.0) if not (r.get("tokens") == 1 and r.get("impl") == "bf16")],
                    None, "gpu")


def test_device_folders():
    assert moe.device_slug("NVIDIA H200") == "h200"
    assert moe.device_slug("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx-pro-6000"
    assert moe.device_slug("Some New GPU 9") == "some-new-gpu-9"
