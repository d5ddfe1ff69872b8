"""`kdtree run --gpus N`'s launcher on real child processes with fake rank bodies
(rank_workers.py; no engine, no GPU): results in rank order, messages relayed in order,
multicast off in every rank, a rank that dies (exit code, signal, KdtreeError) takes the
run down with an error naming it and leaves no process behind, tokens that differ between
ranks are an error, and the CLI's checks of --gpus."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import rank_workers
from typer.testing import CliRunner

from kdtree_cli.app import app
from python_engine.errors import KdtreeError
from python_engine.events import EventWriter, iter_events
from python_engine.native import multi_gpu
from python_engine.native.multi_gpu import MULTICAST_OFF, check_ranks_agree, launch_ranks
from python_engine.native.rank_relay import Relay

NCCL_ID = bytes(range(128))
FAST = {"nccl_id": NCCL_ID, "grace_s": 0.3, "term_s": 1.0}


def pids(folder: Path) -> dict[int, int]:  # rank -> pid, as each rank wrote it
    return {int(p.stem): int(p.read_text()) for p in folder.glob("*.pid")}


def seconds_since_the_death(folder: Path) -> float:
    return time.time() - float((folder / "died").read_text())


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_every_rank_returns_in_rank_order_with_multicast_off(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the caller's environment cannot turn multicast on
    for name in ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.delenv(name, raising=False)
    messages = []
    results = launch_ranks(3, rank_workers.report, (str(tmp_path), ["KDTREE_TEST_MARK"]),
                           on_message=lambda r, m: messages.append((r, m)),
                           env={"KDTREE_TEST_MARK": "x", "NVSHMEM_DISABLE_NVLS": "0"}, **FAST)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["device"] for r in results] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["comm"] == "nccl" and r["nccl_id"] == NCCL_ID for r in results)
    for r in results:
        assert r["env"] == {**MULTICAST_OFF, "KDTREE_TEST_MARK": "x"}
    for rank in range(3):  # each rank's messages arrive, in the order it posted them
        assert [m for r, m in messages if r == rank] == [("started", rank), ("bye", rank)]
    assert len(pids(tmp_path)) == 3 and not any(alive(p) for p in pids(tmp_path).values())


@pytest.mark.parametrize("how, says", [
    ("exit 3", r"rank 1 \(cuda:1\) exited with code 3"),
    ("SIGKILL", r"rank 1 \(cuda:1\) was killed by SIGKILL"),
    ("KdtreeError", r"rank 1 \(cuda:1\) failed \(exit code 1\): native engine \(CUDA error\): out of luck"),
])
def test_a_rank_that_dies_stops_every_rank(tmp_path, how, says):
    with pytest.raises(KdtreeError, match=says + r".*the run was stopped on every rank \(3 in all\)"):
        launch_ranks(3, rank_workers.one_fails, (str(tmp_path), 1, how, False), **FAST)
    assert seconds_since_the_death(tmp_path) < 3  # grace 0.3 s, SIGTERM works at once
    assert len(pids(tmp_path)) == 3
    assert not any(alive(p) for p in pids(tmp_path).values()), "a rank outlived the run"


def test_ranks_that_ignore_sigterm_are_killed(tmp_path):
    with pytest.raises(KdtreeError, match="rank 0 .*exited with code 3"):
        launch_ranks(3, rank_workers.one_fails, (str(tmp_path), 0, "exit 3", True), **{**FAST, "term_s": 0.3})
    assert seconds_since_the_death(tmp_path) < 3  # grace 0.3 s, SIGTERM ignored for 0.3 s, SIGKILL
    assert not any(alive(p) for p in pids(tmp_path).values())


def test_ctrl_c_in_the_launcher_stops_every_rank(tmp_path):
    def interrupt(_rank, message):
        if len(list(tmp_path.glob("*.pid"))) == 2:
            raise KeyboardInterrupt  # as Ctrl-C lands in the launcher's wait

    with pytest.raises(KeyboardInterrupt):
        launch_ranks(2, rank_workers.one_fails, (str(tmp_path), -1, "none", False), on_message=interrupt, **FAST)
    assert len(pids(tmp_path)) == 2 and not any(alive(p) for p in pids(tmp_path).values())


def test_ranks_stop_when_the_launcher_is_killed_outright(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import rank_workers
        from python_engine.native.multi_gpu import launch_ranks
        if __name__ == "__main__":
            launch_ranks(2, rank_workers.one_fails, ({str(tmp_path)!r}, -1, "none", False), nccl_id=b"")
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 10
        while len(pids(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(pids(tmp_path)) == 2, "the ranks never started"
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 3
    while any(alive(p) for p in pids(tmp_path).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids(tmp_path).values()), "a rank outlived its launcher"


def test_tokens_that_differ_between_ranks_are_an_error():
    same = launch_ranks(3, rank_workers.tokens, (-1, 0), nccl_id=b"")
    check_ranks_agree(same)
    differ = launch_ranks(3, rank_workers.tokens, (2, 1), nccl_id=b"")
    with pytest.raises(KdtreeError, match=r"request 1: rank 2's tokens differ from rank 0's at token 1 "
                                          r"\(rank 0: \[5, 6, 7\], rank 2: \[99, 6, 7\]\)"):
        check_ranks_agree(differ)
    with pytest.raises(KdtreeError, match="rank 1 finished 2 request.*rank 0 3"):
        check_ranks_agree([same[0], same[0][:2]])
    with pytest.raises(KdtreeError, match="request 2: .*at token 2"):
        check_ranks_agree([same[0], [*same[0][:2], same[0][2] + [10]]])


def test_rank_zeros_events_and_stderr_reach_the_launchers_streams():
    metrics, stderr = io.StringIO(), io.StringIO()
    relay = Relay(EventWriter(metrics), {"stderr": stderr})
    assert launch_ranks(2, rank_workers.relayed, on_message=relay, **FAST) == [0, 1]
    assert stderr.getvalue() == "loading m\n"
    (parsed,) = iter_events(metrics.getvalue().splitlines())
    assert parsed.warning is None and not parsed.notes
    assert parsed.event["event"] == "run_start" and parsed.event["world_size"] == 2
    assert parsed.event["device"] == "cuda:0-1"


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(multi_gpu, "_nvml_count", lambda: None)
    for listed, count in [("0,1,2", 3), ("GPU-a1,GPU-b2", 2), ("0,1,-1,2", 2), ("", 0), ("-1", 0)]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert multi_gpu.visible_gpu_count() == count, listed
    monkeypatch.setattr(multi_gpu, "_nvml_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert multi_gpu.visible_gpu_count() == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert multi_gpu.visible_gpu_count() == 2


def run_cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, ["run", "--model", "/nonexistent/model", "--ar", "--prompt-ids", "1,2", *args],
                              env={"COLUMNS": "200", **(env or {})})


def test_cli_rejects_bad_gpu_counts(monkeypatch):
    result = run_cli("--gpus", "0", "--engine", "native")
    assert result.exit_code == 2 and "--gpus" in result.output  # typer's range check, before anything runs
    result = run_cli("--gpus", "2", "--engine", "torch")
    assert isinstance(result.exception, KdtreeError)
    assert "--gpus 2 needs --engine native" in str(result.exception)
    result = run_cli("--gpus", "2")  # the default engine is torch
    assert "needs --engine native" in str(result.exception)
    monkeypatch.setattr(multi_gpu, "_nvml_count", lambda: None)
    result = run_cli("--gpus", "3", "--engine", "native", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert isinstance(result.exception, KdtreeError)
    assert "--gpus 3: only 2 GPU(s) visible here (CUDA_VISIBLE_DEVICES='0,1')" in str(result.exception)
    result = run_cli("--gpus", "2", "--engine", "native", "--device", "cuda:1", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert "choose the GPUs with CUDA_VISIBLE_DEVICES" in str(result.exception)


def test_cli_help_explains_gpus():
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--gpus" in result.output and "one process per GPU" in result.output
