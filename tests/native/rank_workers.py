"""Fake rank bodies for tests/native/test_multi_gpu_launch.py: module-level functions, as
the spawn context needs, that never touch an engine. Each writes its pid to
<dir>/<rank>.pid first, so the test can tell afterwards that no rank is left alive, and the
failing rank waits for every other rank's pid file, so that they are all running when it
dies."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.native.multi_gpu import MULTICAST_OFF

WAIT_S = 10.0  # a rank that waits longer for its peers' pid files fails its test


def _started(rank, folder: str) -> None:
    # written whole or not at all: the test reads the pid files while ranks start
    tmp = Path(folder, f"{rank.rank}.pid.partial")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, Path(folder, f"{rank.rank}.pid"))
    rank.post(("started", rank.rank))


def _peers_started(rank, folder: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(list(Path(folder).glob("*.pid"))) < rank.world_size:
        if time.monotonic() > deadline:
            raise RuntimeError("the other ranks never started")
        time.sleep(0.01)


def report(rank, args):
    """Says who it is and what its environment holds; posts a second message."""
    folder, names = args
    _started(rank, folder)
    rank.post(("bye", rank.rank))
    return {"rank": rank.rank, "world_size": rank.world_size, "device": rank.device, "comm": rank.comm,
            "nccl_id": rank.nccl_id, "env": {n: os.environ.get(n) for n in (*MULTICAST_OFF, *names)}}


def one_fails(rank, args):
    """Rank `failing` dies as `how` says once every rank runs (none: no rank fails); the
    others sleep forever (`stubborn`: ignoring SIGTERM, so that only SIGKILL stops them)."""
    folder, failing, how, stubborn = args
    _started(rank, folder)
    if rank.rank != failing:
        if stubborn:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    _peers_started(rank, folder)
    Path(folder, "died").write_text(repr(time.time()))  # when the launcher's clock starts
    if how == "exit 3":
        os._exit(3)
    if how == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "KdtreeError":
        raise KdtreeError("native engine (CUDA error): out of luck")
    raise ValueError(how)


def tokens(rank, args):
    """Rank 0's tokens, or with rank `differs` off by one token in request `request`."""
    differs, request = args
    out = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    if rank.rank == differs:
        out[request] = out[request][:1] + [99] + out[request][2:]
    return out


def relayed(rank, _args):
    """Rank 0 reports as a run's rank 0 does: a run_start event and a line on stderr."""
    from python_engine.native.rank_relay import PostedStream, posted_events

    if rank.rank == 0:
        posted_events(rank).emit("run_start", engine="native", model="m", drafter="d", device="cuda:0-1",
                                 host="h", dtype="bfloat16", block_size=16, budget=32, temperature=0.0,
                                 world_size=rank.world_size)
        stream = PostedStream(rank, "stderr", tty=False)
        stream.write("loading m\n")
        stream.write("")
    return rank.rank
