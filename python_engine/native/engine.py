"""NativeEngine: the native engine of one GPU (or its CPU emulation) behind numpy in, numpy
out. Loads a target (and optionally its DFlash drafter) from Hugging Face directories; the
forwards of part 1 (prefill, forward, keep, draft) and the request loop of part 2 (submit,
step, request, cancel, release). No torch anywhere on this path.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, byref, c_float, c_int32, c_int64, c_uint32, c_void_p
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from python_engine.decode.result import tau_of
from python_engine.errors import KdtreeError
from python_engine.model.config import load_target_config
from python_engine.model.drafter_config import check_against_target, load_drafter_config
from python_engine.native import library as L
from python_engine.native.checkpoint_table import TableEntry, drafter_table, target_table
from python_engine.native.model_desc import describe

ERROR_BUFFER_BYTES = 4096
REQUEST_STATES = {0: "waiting", 1: "running", 2: "done", 3: "cancelled"}
FINISHED_STATES = ("done", "cancelled")  # a request in one of these has ended


@dataclass(frozen=True)
class NativeOptions:
    dtype: str = "bfloat16"     # compute: float32 (exactness checks) or bfloat16
    device: int = 0
    max_slots: int = 1          # concurrent requests
    max_tokens: int = 2048      # prompt + generated tokens per request
    max_budget: int = 64        # DDTree node budget
    max_block_size: int = 0     # 0: the drafter's block size
    prefill_chunk: int = 0      # 0: the engine's default (256)
    use_graphs: bool = True
    load_threads: int = 0       # 0: the engine's default (4)
    # a model split over several GPUs: this engine is part `rank` of `world_size`
    world_size: int = 1
    rank: int = 0
    comm: str = "none"          # "nccl" (one process per GPU) or "simulated" (all parts here, one GPU)
    nccl_id: bytes = b""        # nccl: rank 0's L.nccl_unique_id(), the same on every rank
    sim_group: L.SimGroup | None = None  # simulated: the group every part is created in
    collective_timeout_s: float = 0.0    # 0: the engine's default (300 s)
    # split, several slots: run them as two halves, each half's all-reduce beside the other
    # half's compute (off by default: the halves re-read the weights, slower on two H200s)
    overlap: bool = False
    # "checkpoint" reads the model's safetensors; "dummy" makes every weight on the device from
    # dummy_seed (no files: timing and memory only, its tokens mean nothing)
    load_format: str = "checkpoint"
    dummy_seed: int = 0
    memory_limit: int = 0       # bytes the engine may use on the device (0: what is free)

    @property
    def rank_share(self) -> bool:
        """One rank's part of a split model alone (comm none, world_size > 1): its collectives
        do nothing, so it times and sizes one of world_size GPUs."""
        return self.world_size > 1 and self.comm == "none"

    def to_c(self) -> L.EngineOptionsC:
        if self.dtype not in L.DTYPES:
            raise KdtreeError(f"native engine dtype {self.dtype!r}: choose {' or '.join(L.DTYPES)}")
        if self.comm not in L.COMMS:
            raise KdtreeError(f"native engine comm {self.comm!r}: choose {', '.join(L.COMMS)}")
        if self.load_format not in L.LOAD_FORMATS:
            raise KdtreeError(f"native engine load format {self.load_format!r}: choose {' or '.join(L.LOAD_FORMATS)}")
        if self.memory_limit < 0:
            raise KdtreeError(f"native engine memory limit {self.memory_limit}: must be >= 0 bytes (0: what is free)")
        if self.comm == "nccl" and len(self.nccl_id) != L.NCCL_ID_BYTES:
            raise KdtreeError(f"comm nccl needs the {L.NCCL_ID_BYTES}-byte id of rank 0 (library.nccl_unique_id())")
        opts = L.EngineOptionsC(
            abi_version=L.ABI_VERSION, dtype=L.DTYPES[self.dtype], device=self.device, max_slots=self.max_slots,
            max_tokens=self.max_tokens, max_budget=self.max_budget, max_block_size=self.max_block_size,
            prefill_chunk=self.prefill_chunk, use_graphs=int(self.use_graphs), load_threads=self.load_threads,
            world_size=self.world_size, rank=self.rank, comm=L.COMMS[self.comm],
            collective_timeout_s=self.collective_timeout_s, overlap_collectives=int(self.overlap),
            load_format=L.LOAD_FORMATS[self.load_format], dummy_seed=self.dummy_seed & (2**64 - 1),
            memory_limit=self.memory_limit)
        if self.nccl_id:
            ctypes.memmove(opts.nccl_id, self.nccl_id, L.NCCL_ID_BYTES)
        if self.sim_group is not None:
            opts.sim_group = self.sim_group.handle
        return opts


@dataclass
class RoundRecord:
    request: int
    round: int
    accept_len: int
    tree_size: int
    tree_depth: int
    tokens: int
    emitted: int
    done: bool


@dataclass
class StepReport:
    rounds: int
    batch: int
    records: list[RoundRecord]
    stage_us: dict[str, float]
    admitted: int
    finished: int
    waiting: int
    running: int
    graph_replayed: bool
    tree: dict | None = None  # one request's tree: {"request", "parent", "token", "accepted"}
    collectives: int = 0        # a split model's collectives in the step's round
    # their time (inside the draft and verify stages); None for a rank share, whose
    # collectives are counted but not run
    collective_us: float | None = 0.0


@dataclass
class RequestInfo:
    id: int
    state: str
    slot: int
    tokens: list[int]
    rounds: int
    accepted: int
    prefill_s: float
    decode_s: float

    @property
    def tau(self) -> float:
        return tau_of(self.accepted, self.rounds)


def _ptr(a: np.ndarray | None, ctype):
    return None if a is None else a.ctypes.data_as(POINTER(ctype))


def _i32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int32))


def _table_c(entries: list[TableEntry]):
    arr = (L.TensorEntry * max(1, len(entries)))()
    keep = []
    for i, e in enumerate(entries):
        name, file = e.name.encode(), str(e.file).encode()
        keep += [name, file]
        shape = (ctypes.c_int64 * 4)(*(list(e.shape) + [0] * (4 - len(e.shape))))
        arr[i] = L.TensorEntry(name, file, e.offset, e.nbytes, e.dtype_code, len(e.shape), shape)
    return arr, keep


class NativeEngine:
    """One engine instance; close() (or `with`) frees its GPU memory."""

    def __init__(self, target_dir: str | Path, drafter_dir: str | Path | None = None,
                 options: NativeOptions = NativeOptions(), variant: str = "gpu",
                 progress: Callable[[int, int], None] | None = None, library: Path | None = None):
        self.target_dir = Path(target_dir)
        self.drafter_dir = Path(drafter_dir) if drafter_dir else None
        self.target_config = load_target_config(self.target_dir)
        self.drafter_config = load_drafter_config(self.drafter_dir) if self.drafter_dir else None
        if self.drafter_config is not None:
            check_against_target(self.drafter_config, self.target_config)
        self.lib = L.load_library(library or L.library_path(variant))
        self.variant = variant
        self._lock = threading.Lock()
        self._handle = c_void_p()
        desc = describe(self.target_config, self.drafter_config)
        entries = [] if options.load_format == "dummy" else (
            target_table(self.target_dir) + (drafter_table(self.drafter_dir) if self.drafter_dir else []))
        table, keep = _table_c(entries)
        opts = options.to_c()
        err = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        callback = L.PROGRESS_FN(lambda _user, done, total: progress(done, total)) if progress else L.PROGRESS_FN()
        status = self.lib.kd_engine_create(
            byref(desc.target), byref(desc.drafter) if desc.drafter is not None else None, table, len(entries),
            byref(opts), callback, None, byref(self._handle), err, ERROR_BUFFER_BYTES)
        del keep, desc
        if status != 0:
            self._handle = c_void_p()
            raise L.status_error(status, err.value.decode(errors="replace"))
        got = L.EngineOptionsC()
        self._call(self.lib.kd_engine_options_get, byref(got))
        self.options = NativeOptions(
            dtype="float32" if got.dtype == L.F32 else "bfloat16", device=got.device, max_slots=got.max_slots,
            max_tokens=got.max_tokens, max_budget=got.max_budget, max_block_size=got.max_block_size,
            prefill_chunk=got.prefill_chunk, use_graphs=bool(got.use_graphs), load_threads=got.load_threads,
            world_size=max(1, got.world_size), rank=got.rank, comm={v: k for k, v in L.COMMS.items()}.get(got.comm, "none"),
            nccl_id=options.nccl_id, sim_group=options.sim_group, collective_timeout_s=options.collective_timeout_s,
            overlap=bool(got.overlap_collectives) if max(1, got.world_size) > 1 else options.overlap,
            load_format={v: k for k, v in L.LOAD_FORMATS.items()}[got.load_format], dummy_seed=int(got.dummy_seed),
            memory_limit=int(got.memory_limit))
        self.vocab = self.target_config.vocab_size
        self.feature_width = (len(self.drafter_config.target_layer_ids) * self.target_config.hidden_size
                              if self.drafter_config else 0)

    # ---- plumbing --------------------------------------------------------------------------
    def _call(self, fn, *args) -> None:
        if not self._handle:
            raise KdtreeError("the native engine is closed")
        status = fn(self._handle, *args)
        if status != 0:
            raise L.status_error(status, self.lib.kd_engine_last_error(self._handle).decode(errors="replace"))

    def close(self) -> None:
        with self._lock:
            if self._handle:
                self.lib.kd_engine_free(self._handle)
                self._handle = c_void_p()

    def __enter__(self) -> "NativeEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def memory(self) -> dict[str, int]:
        m = L.MemoryReportC()
        with self._lock:
            self._call(self.lib.kd_engine_memory, byref(m))
        return {name: int(getattr(m, name)) for name, _ in L.MemoryReportC._fields_}

    def weights(self) -> list[dict]:
        """The engine's weight plan as held on this GPU (this rank's parts when split):
        [{"name", "shape", "bytes"}] in allocation order."""
        out = []
        with self._lock:
            count = self.lib.kd_engine_weight_count(self._handle)
            info = L.WeightInfoC()
            for i in range(max(0, count)):
                self._call(self.lib.kd_engine_weight_info, i, byref(info))
                out.append({"name": info.name.decode(), "shape": tuple(info.shape[: info.ndim]), "bytes": int(info.bytes)})
        return out

    # ---- part 1: forwards --------------------------------------------------------------------
    def slot_reset(self, slot: int) -> None:
        with self._lock:
            self._call(self.lib.kd_slot_reset, slot)

    def slot_lengths(self, slot: int) -> tuple[int, int]:
        t, d = c_int32(), c_int32()
        with self._lock:
            self._call(self.lib.kd_slot_lengths, slot, byref(t), byref(d))
        return t.value, d.value

    def prefill(self, slot: int, tokens, hidden: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """(last token's logits [V], hidden states [n, features] or None)."""
        toks = _i32(tokens).reshape(-1)
        logits = np.empty(self.vocab, dtype=np.float32)
        h = np.empty((toks.size, self.feature_width), dtype=np.float32) if hidden else None
        with self._lock:
            self._call(self.lib.kd_prefill, slot, _ptr(toks, c_int32), toks.size, _ptr(logits, c_float),
                       _ptr(h, c_float))
        return logits, h

    def forward(self, first_slot: int, tokens, positions, vis=None, commit: bool = True, logits: bool = True,
                hidden: bool = False) -> tuple[np.ndarray | None, np.ndarray | None]:
        """tokens, positions [B, T]; vis uint32 [B, T, words] (None: causal). Returns
        (logits [B, T, V], hidden [B, T, features])."""
        toks = _i32(tokens)
        pos = _i32(positions)
        if toks.ndim != 2 or pos.shape != toks.shape:
            raise KdtreeError(f"forward: tokens and positions must both be [batch, T], got {toks.shape} and {pos.shape}")
        B, T = toks.shape
        v = None
        words = 0
        if vis is not None:
            v = np.ascontiguousarray(np.asarray(vis, dtype=np.uint32))
            if v.ndim != 3 or v.shape[:2] != (B, T):
                raise KdtreeError(f"forward: vis must be [batch, T, words], got {v.shape}")
            words = v.shape[2]
        lg = np.empty((B, T, self.vocab), dtype=np.float32) if logits else None
        h = np.empty((B, T, self.feature_width), dtype=np.float32) if hidden else None
        with self._lock:
            self._call(self.lib.kd_forward, first_slot, B, T, _ptr(toks, c_int32), _ptr(pos, c_int32),
                       _ptr(v, c_uint32), words, int(commit), _ptr(lg, c_float), _ptr(h, c_float))
        return lg, h

    def keep(self, slot: int, accepted) -> None:
        acc = _i32(accepted).reshape(-1)
        with self._lock:
            self._call(self.lib.kd_slot_keep, slot, _ptr(acc, c_int32), acc.size)

    def draft(self, first_slot: int, bonus, block_size: int, ctx_features=None, ctx_count=None) -> np.ndarray:
        """Drafter logits [B, block_size - 1, V]; ctx_features float32 [B, max_ctx, features]
        with ctx_count [B] valid rows each are appended to the drafter's context first."""
        bon = _i32(bonus).reshape(-1)
        B = bon.size
        feats = None
        max_ctx = 0
        counts = np.zeros(B, dtype=np.int32)
        if ctx_features is not None:
            feats = np.ascontiguousarray(np.asarray(ctx_features, dtype=np.float32))
            if feats.ndim != 3 or feats.shape[0] != B or feats.shape[2] != self.feature_width:
                raise KdtreeError(f"draft: ctx_features must be [{B}, max_ctx, {self.feature_width}], got {feats.shape}")
            max_ctx = feats.shape[1]
            counts = _i32(ctx_count if ctx_count is not None else [max_ctx] * B).reshape(-1)
        out = np.empty((B, block_size - 1, self.vocab), dtype=np.float32)
        with self._lock:
            self._call(self.lib.kd_draft, first_slot, B, _ptr(feats, c_float), _ptr(counts, c_int32), max_ctx,
                       _ptr(bon, c_int32), block_size, _ptr(out, c_float))
        return out

    # ---- part 2: requests ----------------------------------------------------------------------
    def submit(self, prompt, max_new_tokens: int, *, budget: int = 0, block_size: int = 0, ar: bool = False,
               temperature: float = 0.0, seed: int = 0, stop_ids=()) -> int:
        p = _i32(prompt).reshape(-1)
        stops = _i32(list(stop_ids)).reshape(-1)
        req = L.RequestC(prompt=_ptr(p, c_int32), prompt_len=p.size, max_new_tokens=max_new_tokens, budget=budget,
                         block_size=block_size, ar=int(ar), temperature=temperature, seed=seed & (2**64 - 1),
                         stop_ids=_ptr(stops, c_int32) if stops.size else None, n_stop=stops.size)
        rid = c_int64()
        with self._lock:
            self._call(self.lib.kd_submit, byref(req), byref(rid))
        return rid.value

    def step(self, want_tree: bool = False) -> StepReport:
        r = L.StepReportC()
        with self._lock:
            self._call(self.lib.kd_step, int(want_tree), byref(r))
        records = [RoundRecord(int(x.request), x.round, x.accept_len, x.tree_size, x.tree_depth, x.tokens,
                               x.emitted, bool(x.done)) for x in r.records[: r.n_records]]
        tree = None
        if r.sampled_slot >= 0:
            n = r.sample_n
            tree = {"slot": r.sampled_slot, "request": int(r.sample_request), "parent": list(r.sample_parent[: n + 1]),
                    "token": list(r.sample_token[: n + 1]),
                    "accepted": list(r.sample_accepted[: r.sample_accept_len])}
        return StepReport(r.rounds, r.batch, records, dict(zip(L.STAGES, map(float, r.stage_us))), r.admitted,
                          r.finished, r.waiting, r.running, bool(r.graph_replayed), tree, r.collectives,
                          float(r.collective_us) if r.collectives_run else None)

    def request(self, rid: int) -> RequestInfo:
        info = L.RequestInfoC()
        cap = self.options.max_tokens
        buf = np.zeros(cap, dtype=np.int32)
        with self._lock:
            self._call(self.lib.kd_request_get, rid, byref(info), _ptr(buf, c_int32), cap)
        return RequestInfo(int(info.id), REQUEST_STATES.get(info.state, str(info.state)), info.slot,
                           buf[: info.tokens].tolist(), info.rounds, int(info.accepted), info.prefill_s, info.decode_s)

    def cancel(self, rid: int) -> None:
        with self._lock:
            self._call(self.lib.kd_cancel, rid)

    def release(self, rid: int) -> None:
        with self._lock:
            self._call(self.lib.kd_release, rid)


def device_memory(device: int = 0, variant: str = "gpu") -> tuple[int, int]:
    """(free, total) bytes of a device, as the engine's CUDA runtime sees them."""
    lib = L.load_library(L.library_path(variant))
    free, total = ctypes.c_uint64(), ctypes.c_uint64()
    status = lib.kd_device_memory(device, byref(free), byref(total))
    if status != 0:
        raise L.status_error(status, f"cannot read device {device}'s memory")
    return free.value, total.value


def philox4x32_10(counter, key, variant: str = "emu") -> list[int]:
    """The sampler's generator, for its known-answer test."""
    lib = L.load_library(L.library_path(variant))
    c = (c_uint32 * 4)(*counter)
    k = (c_uint32 * 2)(*key)
    out = (c_uint32 * 4)()
    lib.kd_philox4x32_10(c, k, out)
    return list(out)
