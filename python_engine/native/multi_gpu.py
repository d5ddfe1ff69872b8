"""Several GPUs, one process each: `launch_ranks` starts a rank per GPU (multiprocessing's
"spawn" context: CUDA and NCCL do not survive a fork) and supervises them until every rank
has returned, or until one fails, when it stops the rest so that no rank hangs in a
collective whose peer is gone.

Every rank runs the same requests in the same order, so the ranks stay in lockstep and
produce the same tokens; `check_ranks_agree` is the check the launcher makes of that.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from python_engine.errors import KdtreeError

# NVLink multicast can put a host's shared GPUs out of service for a long time, so every
# rank runs with it off in NCCL, PyTorch and NVSHMEM, whatever the caller's environment says.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# NCCL's peer-to-peer path (GPU to GPU over PCIe) hangs the first collective on PCIe-only
# RTX PRO 6000 boxes unless it is off (NVIDIA/nccl#1999, NCCL 2.26-2.29;
# local-inference-lab/rtx6kpro#15, NCCL 2.30.4), and fails on RTX 5090 and 4090 boxes
# (NVIDIA/nccl#1637, NVIDIA/nccl-tests#117). NCCL then stages transfers through host
# memory, slower but working. KDTREE_P2P (a host's `p2p` key, kdtree.toml)
# says auto, on or off; auto turns it off when a visible GPU is an RTX board.
P2P_ENV = "KDTREE_P2P"
P2P_SETTINGS = ("auto", "on", "off")
P2P_OFF = {"NCCL_P2P_DISABLE": "1"}
P2P_OFF_BOARDS = ("RTX",)  # GPU names (NVML) whose peer-to-peer path auto turns off
GRACE_S = 5.0  # after a rank dies, how long the others get to stop on their own
TERM_S = 5.0  # after SIGTERM, how long before SIGKILL
PARENT_POLL_S = 0.5  # how often a rank checks that its launcher is still there
DRAIN_S = 1.0  # the longest wait for the rest of an exited rank's messages

_send_lock = threading.Lock()  # a rank's engine may report from several threads


@dataclass(frozen=True)
class Rank:
    """Who a rank is, as its target function gets it; `post` sends a message to the launcher."""
    rank: int
    world_size: int
    device: int
    comm: str  # "nccl" | "simulated" | "none": the engine's collectives
    nccl_id: bytes
    outbox: Connection | None = field(default=None, repr=False, compare=False)

    def post(self, message: Any) -> None:
        """Hand `message` to the launcher's on_message(rank, message), in order."""
        _send(self.outbox, ("message", message))


def launch_ranks(n: int, target: Callable[[Rank, Any], Any], args: Any = None, *,
                 nccl_id: bytes | None = None, comm: str = "nccl",
                 on_message: Callable[[int, Any], None] | None = None,
                 grace_s: float = GRACE_S, term_s: float = TERM_S, env: dict[str, str] | None = None) -> list:
    """Run target(rank, args) in n processes, rank r on device r; return their results in
    rank order. `target` must be a module-level function (spawn pickles it by name), and
    its result picklable. When a rank raises, exits non-zero or is killed, the others get
    `grace_s` to stop, then SIGTERM and, `term_s` later, SIGKILL; the KdtreeError raised
    names that rank. Ctrl-C stops every rank. `nccl_id`: None gets one from the native
    library (comm "nccl"). `env`: set in each rank (multicast stays off regardless)."""
    if n < 1:
        raise KdtreeError(f"--gpus {n}: give 1 or more")
    if nccl_id is None:
        nccl_id = new_nccl_id() if comm == "nccl" else b""
    ctx = mp.get_context("spawn")
    child_env = {**p2p_environment(), **(env or {}), **MULTICAST_OFF}
    children: list[_Child] = []
    try:
        for r in range(n):
            reader, writer = ctx.Pipe(duplex=False)
            rank = Rank(r, n, r, comm, nccl_id, writer)
            process = ctx.Process(target=_rank_main, args=(target, rank, args, child_env, os.getpid()),
                                  name=f"kdtree-rank-{r}", daemon=True)
            children.append(_Child(rank, process, reader))
            process.start()
            writer.close()  # the rank holds the only writing end: its exit shows here as EOF
        failure = _supervise(children, on_message or (lambda _r, _m: None), grace_s)
    except BaseException:  # Ctrl-C, or an on_message that failed: no rank outlives the launcher
        _stop(children, term_s)
        raise
    finally:
        for c in children:
            c.reader.close()
    _stop(children, term_s)
    if failure:
        raise KdtreeError(f"{failure}; the run was stopped on every rank ({n} in all)")
    return [c.result for c in children]


def check_ranks_agree(tokens_by_rank: list[list[list[int]]]) -> None:
    """Every rank's tokens per request equal rank 0's; else a KdtreeError naming the first
    request (and token) where a rank differs."""
    first = tokens_by_rank[0]
    for r, tokens in enumerate(tokens_by_rank[1:], 1):
        if len(tokens) != len(first):
            raise KdtreeError(f"rank {r} finished {len(tokens)} request(s), rank 0 {len(first)}: "
                              "the ranks fell out of lockstep")
    for i, expected in enumerate(first):
        for r, tokens in enumerate(tokens_by_rank[1:], 1):
            got = tokens[i]
            if got != expected:
                at = next((k for k, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
                raise KdtreeError(
                    f"request {i}: rank {r}'s tokens differ from rank 0's at token {at} "
                    f"(rank 0: {expected[at:at + 4]}, rank {r}: {got[at:at + 4]}): the ranks fell out of lockstep")


def check_gpu_count(n: int) -> None:
    """--gpus N: at least 1 and, for several, no more than this machine shows (when it can
    tell; otherwise the engine says what it finds)."""
    if n < 1:
        raise KdtreeError(f"--gpus {n}: give 1 or more")
    if n == 1:
        return  # the one-GPU run, as without --gpus
    visible = visible_gpu_count()
    if visible is not None and n > visible:
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={listed!r})" if listed is not None else ""
        raise KdtreeError(f"--gpus {n}: only {visible} GPU(s) visible here{where}")


def visible_gpu_count() -> int | None:
    """GPUs a process here can use: CUDA_VISIBLE_DEVICES's list (up to its first invalid
    entry, where CUDA stops reading it), capped by what NVML counts; None if neither says."""
    counted = _nvml_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return counted
    entries = 0
    for entry in listed.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        entries += 1
    return entries if counted is None else min(entries, counted)


def p2p_environment(setting: str | None = None, gpu_names: list[str] | None = None) -> dict[str, str]:
    """The ranks' NCCL peer-to-peer variables for `setting` ($KDTREE_P2P, default auto):
    off sets NCCL_P2P_DISABLE=1; auto does so on RTX boards (the GPUs NVML names here), and
    leaves a NCCL_P2P_DISABLE the caller set alone; on sets nothing."""
    setting = (setting if setting is not None else os.environ.get(P2P_ENV, "auto")).strip().lower()
    if setting not in P2P_SETTINGS:
        raise KdtreeError(f"{P2P_ENV}={setting!r}: choose {', '.join(P2P_SETTINGS)}")
    if setting == "on":
        return {}
    if setting == "off":
        return dict(P2P_OFF)
    if "NCCL_P2P_DISABLE" in os.environ:
        return {}
    names = gpu_names if gpu_names is not None else _nvml_names()
    return dict(P2P_OFF) if any(board in name for name in names for board in P2P_OFF_BOARDS) else {}


def check_split_ready(gpus: int) -> None:
    """A host configured with several GPUs must be able to split the model: NCCL built into
    the engine and loadable. Without it the engine would run on one GPU only, which a
    deploy must not pass as ready."""
    if gpus <= 1:
        return
    from python_engine.native.library import nccl_unique_id

    try:
        nccl_unique_id("gpu")
    except KdtreeError as exc:
        raise KdtreeError(f"this host is configured with gpus = {gpus}, and NCCL is not usable here, so the engine "
                          f"could run on one GPU only: {exc}. Install NCCL (pip install nvidia-nccl-cu13, or the "
                          f"system's libnccl2) and rebuild (kdtree build), or set gpus = 1 for this host") from None


def new_nccl_id() -> bytes:
    """Rank 0's NCCL unique id, made here and handed to every rank."""
    os.environ.update(MULTICAST_OFF)  # making an id may initialise NCCL in this process too
    from python_engine.native.library import nccl_unique_id

    try:
        return nccl_unique_id("gpu")
    except KdtreeError as exc:
        raise KdtreeError(f"several GPUs talk through NCCL, and it is not usable here: {exc}") from None


# ---- the launcher's side -------------------------------------------------------------------
@dataclass
class _Child:
    rank: Rank
    process: Any  # a spawn-context Process
    reader: Connection
    result: Any = None
    returned: bool = False
    error: str | None = None
    open: bool = True  # the reader has not reached EOF

    def read(self, on_message: Callable[[int, Any], None]) -> None:
        """Take one message from the rank (EOF closes the reader)."""
        try:
            kind, payload = self.reader.recv()
        except (EOFError, OSError):
            self.open = False
            return
        if kind == "message":
            on_message(self.rank.rank, payload)
        elif kind == "result":
            self.result, self.returned = payload, True
        elif kind == "error":
            self.error = payload

    def failure(self) -> str | None:
        """What went wrong with this (exited) rank, or None if it returned a result."""
        code = self.process.exitcode
        who = f"rank {self.rank.rank} (cuda:{self.rank.device})"
        if code == 0 and self.returned:
            return None
        if self.error is not None:
            return f"{who} failed (exit code {code}): {self.error}"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"{who} was killed by {name}"
        if code == 0:
            return f"{who} exited without a result"
        return f"{who} exited with code {code}"


def _supervise(children: list[_Child], on_message: Callable[[int, Any], None], grace_s: float) -> str | None:
    """Relay messages until every rank has exited; after the first failure, only until
    the grace period ends. Returns that failure, or None."""
    running = {c.process.sentinel: c for c in children}
    failure, stop_at = None, None
    while running:
        readers = {c.reader: c for c in children if c.open}
        timeout = None if stop_at is None else max(0.0, stop_at - time.monotonic())
        ready = wait([*readers, *running], timeout)
        if not ready and stop_at is not None:
            break  # the grace period is over: the survivors get stopped
        for obj in ready:
            if obj in readers:
                readers[obj].read(on_message)
            elif obj in running:
                child = running.pop(obj)
                child.process.join()
                # what the rank sent before it exited (EOF comes at once, unless a process
                # it started still holds the pipe)
                while child.open and child.reader.poll(DRAIN_S):
                    child.read(on_message)
                if failure is None and (failure := child.failure()):
                    stop_at = time.monotonic() + grace_s
    return failure


def _stop(children: list[_Child], term_s: float) -> None:
    """SIGTERM every rank still running, SIGKILL those still there `term_s` later; reap all."""
    started = [c.process for c in children if c.process.pid is not None]
    for p in started:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + term_s
    for p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.kill()
            p.join()


# ---- the rank's side -------------------------------------------------------------------------
def _rank_main(target: Callable[[Rank, Any], Any], rank: Rank, args: Any, env: dict[str, str],
               parent_pid: int) -> None:
    os.environ.update(env)  # before the engine loads NCCL
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # on Ctrl-C the launcher stops every rank
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    try:
        result = target(rank, args)
    except KdtreeError as exc:
        _send(rank.outbox, ("error", str(exc)))
        sys.exit(1)
    except BaseException as exc:  # a bug: its traceback goes to this rank's stderr as well
        _send(rank.outbox, ("error", f"{type(exc).__name__}: {exc}"))
        raise
    _send(rank.outbox, ("result", result))


def _send(outbox: Connection | None, message: tuple) -> None:
    if outbox is None:
        return
    with _send_lock:
        try:
            outbox.send(message)
        except (BrokenPipeError, ConnectionResetError):
            os._exit(1)  # the launcher is gone: nobody is left to report to


def _exit_with_parent(parent_pid: int) -> None:
    """A launcher killed outright cannot stop its ranks: they stop themselves."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _nvml_names() -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())]
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML here: no names, so auto leaves peer-to-peer as NCCL chooses
        return []


def _nvml_count() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML here (no driver, no package): the count is unknown
        return None
