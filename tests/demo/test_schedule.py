"""The learning-rate schedule and the time guard that keeps a stage inside one GPU command."""

from __future__ import annotations

import pytest

from python_engine.train import schedule
from python_engine.train.schedule import StepPlan, TimeGuard, lr_at


def test_lr_warms_up_then_decays_to_the_floor():
    lrs = [lr_at(s, 100, 1.0, 10, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("per_step, expect_cut", [(0.5, False), (2.0, True)])
def test_guard_cuts_the_plan_once_when_it_would_overrun(monkeypatch, per_step, expect_cut):
    clock = FakeClock()
    monkeypatch.setattr(schedule.time, "perf_counter", clock)
    plan = StepPlan(planned=200, total=200, warmup=50)
    logs = []
    guard = TimeGuard(plan, budget_s=200.0, probe_step=20, log=logs.append)
    step = 0
    while step < plan.total:
        clock.now += per_step
        guard.check(step)
        guard.overran(step)
        step += 1
    if expect_cut:
        # 2 s/step: ~100 steps fit in 200 s; the cut happens at the probe, inside warmup
        assert 95 <= plan.total <= 101 and plan.warmup <= plan.total // 10 and "cut 200" in plan.cut_reason
        assert clock.now <= 200 * 1.15
    else:
        assert plan.total == 200 and plan.cut_reason is None and "projected" in logs[0]


def test_guard_stops_a_run_that_slows_down_after_the_probe(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(schedule.time, "perf_counter", clock)
    plan = StepPlan(planned=100, total=100, warmup=5)
    guard = TimeGuard(plan, budget_s=100.0, probe_step=20, log=lambda _: None)
    step = 0
    while step < plan.total:
        clock.now += 0.5 if step < 30 else 5.0  # fine at the probe, slow later
        guard.check(step)
        guard.overran(step)
        step += 1
    assert plan.total < 100 and "stopped at step" in plan.cut_reason and clock.now <= 100 * 1.15 + 5
