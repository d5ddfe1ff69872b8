"""The round projection's parts against independent oracles: a Monte Carlo draw of random
routing, the measured tables at their own points, and the composition of the round."""

from __future__ import annotations

import json

import numpy as np
import pytest

from python_engine.device_profiles import device_profile
from python_engine.errors import KdtreeError
from python_engine.model.config import load_target_config
from python_engine.model.drafter_config import load_drafter_config
from python_engine.plan import inputs as M
from python_engine.plan.cost import (Acceptance, CostModel, Host, RoutingSharing, interpolate,
                                     random_distinct_experts)
from python_engine.plan.weights import drafter_weights, target_weights

KIMI, KIMI_DRAFTER = "refs/configs/kimi-k2.6", "refs/configs/kimi-k2.6-dflash"


@pytest.fixture(scope="module")
def kimi():
    cfg, d = load_target_config(KIMI), load_drafter_config(KIMI_DRAFTER)
    return cfg, d, target_weights(cfg, 8), drafter_weights(d)


def ct200(p2p: bool = False) -> Host:
    return Host(device_profile("rtx-pro-6000"), 8, "pcie", p2p)


def test_distinct_experts_equal_a_random_routing_draw(rng):
    tokens = int(rng.integers(1, 80))
    draws = [len({int(e) for _ in range(tokens) for e in rng.choice(384, 8, replace=False)}) for _ in range(400)]
    expected = random_distinct_experts(384, 8, tokens)
    assert abs(np.mean(draws) - expected) < 4 * np.std(draws) / np.sqrt(len(draws)) + 0.5, (tokens, expected)


def test_interpolate_hits_its_points_and_lies_between(rng):
    pts = {float(x): float(rng.normal()) for x in sorted(rng.choice(1000, 5, replace=False) + 1)}
    for x, y in pts.items():
        assert interpolate(pts, x) == pytest.approx(y)
    xs = sorted(pts)
    mid = (xs[1] + xs[2]) / 2
    assert min(pts[xs[1]], pts[xs[2]]) <= interpolate(pts, mid) <= max(pts[xs[1]], pts[xs[2]])
    assert interpolate(pts, xs[0] - 5) == pts[xs[0]] and interpolate(pts, xs[-1] + 5) == pts[xs[-1]]


def test_on_the_h200_the_measured_tables_come_back():
    h200 = CostModel(Host(device_profile("h200"), 2, "nvlink"), context=32768)
    for (heads, rows, prefix), (us, _) in M.H200_VERIFY_ATTN_US.items():
        h200.context = prefix
        assert h200.attention_us(heads, rows, prefix) == pytest.approx(us)
    for rows, us in M.H200X2_ALLREDUCE_US.items():
        assert h200.allreduce_call_us(rows) == us
    assert h200.bandwidth() == pytest.approx(M.H200_COPY_BANDWIDTH)


def test_pcie_allreduce_grows_with_ranks_payload_and_without_p2p():
    off, on = CostModel(ct200(False), 32768), CostModel(ct200(True), 32768)
    assert off.allreduce_call_us(65) > on.allreduce_call_us(65) > M.H200X2_ALLREDUCE_US[65]
    assert off.allreduce_call_us(1) < off.allreduce_call_us(17) < off.allreduce_call_us(65)
    four = CostModel(Host(device_profile("rtx-pro-6000"), 4, "pcie", False), 32768)
    assert four.allreduce_call_us(65) < off.allreduce_call_us(65)
    user = CostModel(ct200(), 32768, allreduce_us=12.5)
    assert user.allreduce_call_us(65) == 12.5


def test_round_adds_its_parts_and_tokens_per_second_follow(kimi, rng):
    cfg, d, w, db = kimi
    model = CostModel(ct200(), int(rng.integers(1024, 131072)))
    ar = model.project(cfg, d, w, db, 0)
    assert ar.tau == 1.0 and ar.drafter_ms == 0 and ar.machinery_ms == 0 and ar.rows == 1
    assert ar.collectives_ms * 1e3 == pytest.approx(2 * 61 * model.allreduce_call_us(1) + model.gather_call_us(8))
    budget = int(rng.choice([4, 8, 16, 32, 64]))
    r = model.project(cfg, d, w, db, budget)
    assert r.rows == budget + 1
    assert r.round_ms == pytest.approx(r.weights_ms + r.attention_ms + r.collectives_ms + r.drafter_ms + r.machinery_ms)
    assert r.tokens_per_s() == pytest.approx(r.tau / r.round_ms * 1e3)
    assert r.distinct_experts == pytest.approx(random_distinct_experts(384, 8, budget + 1))
    # the drafter is read whole on every GPU each round
    assert r.drafter_ms * 1e-3 * model.bandwidth() >= db


def test_measured_routing_sharing_cuts_the_expert_reads(kimi, tmp_path):
    cfg, d, w, db = kimi
    f = tmp_path / "routing.json"
    f.write_text(json.dumps({"ratio_by_tokens": {"1": 1.0, "65": 0.5}, "source": "demo pair", "commit": "abc1234"}))
    shared = CostModel(ct200(), 32768, routing=RoutingSharing.from_file(f))
    plain = CostModel(ct200(), 32768)
    a, b = shared.project(cfg, d, w, db, 64), plain.project(cfg, d, w, db, 64)
    assert a.distinct_experts == pytest.approx(b.distinct_experts / 2)
    assert a.weights_ms < b.weights_ms and a.attention_ms == b.attention_ms
    assert "abc1234" in shared.routing.source and shared.routing.kind == "measured"
    bench = tmp_path / "bench.json"  # what `kdtree bench routing` writes
    bench.write_text(json.dumps({"run": {"commit": "def5678"},
                                 "ratio_by_T": {"T": [1, 65], "ratio": [1.0, 0.5], "measured_on": "demo pair"}}))
    from_bench = RoutingSharing.from_file(bench)
    assert from_bench.ratio(65) == 0.5 and "def5678" in from_bench.source and "demo pair" in from_bench.source
    f.write_text(json.dumps({"ratio_by_tokens": {"9": 1.5}}))
    with pytest.raises(KdtreeError, match="ratios in"):
        RoutingSharing.from_file(f)
    f.write_text(json.dumps({"something": 1}))
    with pytest.raises(KdtreeError, match="ratio_by_T"):
        RoutingSharing.from_file(f)


def test_acceptance_curve_is_anchored_and_capped():
    acc = Acceptance()
    assert acc.tau(8, 8) == pytest.approx(5.3)
    taus = [acc.tau(b, 8) for b in (4, 8, 16, 32, 64)]
    assert taus == sorted(taus) and taus[-1] <= 8
    assert acc.tau(64, 4) == 4.0  # never more than a block emits
    assert Acceptance(5.3, "x", {16: 6.5}).tau(16, 8) == 6.5


def test_a_small_model_takes_the_measured_latency_floor_not_its_byte_time(kimi):
    demo = load_target_config("refs/models/demo-target")
    model = CostModel(Host(device_profile("h200"), 1, "nvlink"), 1024)
    ar = model.project(demo, None, target_weights(demo, 1), 0, 0)
    assert ar.latency_ms > 0
    assert ar.round_ms == pytest.approx(demo.num_hidden_layers * M.H200_LAYER_FLOOR_US / 1e3)
    assert ar.tokens_per_s() == pytest.approx(M.H200_DEMO_AR_TOKENS_PER_S)  # the figure it was taken from
    cfg, d, w, db = kimi
    assert all(CostModel(ct200(), 1024).project(cfg, d, w, db, b).latency_ms == 0 for b in (0, 8, 64))
