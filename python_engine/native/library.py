"""The native engine's shared library through ctypes: finding it, the C structs of
csrc/engine/kdtree_engine.h mirrored field for field, and the status codes as errors.

Two builds of one source: `lib/libkdtree_engine.so` (the GPU engine) and
`lib/libkdtree_engine_emu.so` (the same engine on the CPU through the SIMT emulator, for
tests). `kdtree build` makes both; KDTREE_ENGINE_LIB points at another file.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int32, c_int64, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)
from functools import lru_cache
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

ABI_VERSION = 6  # KD_ENGINE_ABI
NCCL_ID_BYTES = 128  # KD_NCCL_ID_BYTES
MAX_WORLD = 8  # KD_MAX_WORLD
COMMS = {"none": 0, "nccl": 1, "simulated": 2}  # kd_comm_kind ("none" with world_size > 1: one rank's share)
LOAD_FORMATS = {"checkpoint": 0, "dummy": 1}  # kd_load_format
MAX_TARGET_LAYER_IDS = 16
MAX_STOP_IDS = 16
MAX_BATCH = 256
STAGES = ("draft", "tree_build", "verify", "commit", "host")
F32, BF16 = 0, 1  # kd_dtype
DTYPES = {"float32": F32, "bfloat16": BF16}

LIBRARY_NAMES = {"gpu": "libkdtree_engine.so", "emu": "libkdtree_engine_emu.so"}
ENV_LIBRARY = "KDTREE_ENGINE_LIB"
DEFAULT_BUILD_DIR = PROJECT_ROOT / "build" / "release"

STATUS_NAMES = {
    1: "invalid argument",
    2: "over the engine's limits",
    3: "checkpoint load error",
    4: "out of memory",
    5: "CUDA error",
    6: "not allowed now",
    7: "internal error",
}


class NativeError(KdtreeError):
    """A failed call into the native engine: `status` is its kd_status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class TensorEntry(Structure):
    _fields_ = [("name", c_char_p), ("file", c_char_p), ("offset", c_uint64), ("nbytes", c_uint64),
                ("dtype", c_int32), ("ndim", c_int32), ("shape", c_int64 * 4)]


class TargetConfigC(Structure):
    _fields_ = [(name, c_int32) for name in (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_layers", "num_heads", "q_lora_rank",
        "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim",
        "n_routed_experts", "n_shared_experts", "experts_per_token", "n_group", "topk_group",
        "first_dense_layers", "norm_topk_prob", "rope_interleave", "tie_word_embeddings", "experts_int4")] + [
        (name, c_float) for name in (
            "routed_scaling_factor", "rms_norm_eps", "latent_norm_eps", "softmax_scale", "rope_attention_factor")] + [
        ("rope_inv_freq", POINTER(c_float))]


class DrafterConfigC(Structure):
    _fields_ = [(name, c_int32) for name in (
        "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
        "block_size", "mask_token_id", "n_target_layers")] + [
        ("target_layer_ids", c_int32 * MAX_TARGET_LAYER_IDS)] + [
        (name, c_float) for name in (
            "rms_norm_eps", "input_embedding_scale", "output_multiplier", "final_logit_softcapping",
            "rope_attention_factor")] + [
        ("rope_inv_freq", POINTER(c_float))]


class EngineOptionsC(Structure):
    _fields_ = [(name, c_int32) for name in (
        "abi_version", "dtype", "device", "max_slots", "max_tokens", "max_budget", "max_block_size",
        "prefill_chunk", "use_graphs", "load_threads", "world_size", "rank", "comm")] + [
        ("collective_timeout_s", c_float), ("nccl_id", c_uint8 * NCCL_ID_BYTES), ("sim_group", c_void_p),
        ("overlap_collectives", c_int32), ("load_format", c_int32), ("dummy_seed", c_uint64),
        ("memory_limit", c_uint64)]


class MemoryReportC(Structure):
    _fields_ = [(name, c_uint64) for name in (
        "weights", "target_cache", "drafter_cache", "workspace", "total",
        "device_total", "device_free_before", "device_free_after", "load_us",
        "target_weights", "drafter_weights", "limit")]


class WeightInfoC(Structure):
    _fields_ = [("name", ctypes.c_char * 160), ("ndim", c_int32), ("shape", c_int64 * 4), ("bytes", c_uint64)]


class RequestC(Structure):
    _fields_ = [("prompt", POINTER(c_int32)), ("prompt_len", c_int32), ("max_new_tokens", c_int32),
                ("budget", c_int32), ("block_size", c_int32), ("ar", c_int32), ("temperature", c_float),
                ("seed", c_uint64), ("stop_ids", POINTER(c_int32)), ("n_stop", c_int32)]


class RequestInfoC(Structure):
    _fields_ = [("id", c_int64), ("state", c_int32), ("slot", c_int32), ("tokens", c_int32),
                ("rounds", c_int32), ("accepted", c_int64), ("prefill_s", c_double), ("decode_s", c_double)]


class RoundRecordC(Structure):
    _fields_ = [("request", c_int64), ("round", c_int32), ("accept_len", c_int32), ("tree_size", c_int32),
                ("tree_depth", c_int32), ("tokens", c_int32), ("emitted", c_int32), ("done", c_int32)]


class StepReportC(Structure):
    _fields_ = [("rounds", c_int32), ("batch", c_int32), ("n_records", c_int32),
                ("records", RoundRecordC * MAX_BATCH), ("stage_us", c_float * len(STAGES)),
                ("admitted", c_int32), ("finished", c_int32), ("waiting", c_int32), ("running", c_int32),
                ("graph_replayed", c_int32), ("sampled_slot", c_int32), ("sample_request", c_int64), ("sample_n", c_int32),
                ("sample_parent", c_int32 * 1025), ("sample_token", c_int32 * 1025),
                ("sample_accepted", c_int32 * 33), ("sample_accept_len", c_int32),
                ("collectives", c_int32), ("collective_us", c_float), ("collectives_run", c_int32)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)

_SIGNATURES = {
    "kd_abi_version": ([], c_int32),
    "kd_device_memory": ([c_int32, POINTER(c_uint64), POINTER(c_uint64)], c_int32),
    "kd_engine_create": ([POINTER(TargetConfigC), POINTER(DrafterConfigC), POINTER(TensorEntry), c_int32,
                          POINTER(EngineOptionsC), PROGRESS_FN, c_void_p, POINTER(c_void_p), c_char_p, c_size_t],
                         c_int32),
    "kd_engine_free": ([c_void_p], None),
    "kd_engine_last_error": ([c_void_p], c_char_p),
    "kd_engine_memory": ([c_void_p, POINTER(MemoryReportC)], c_int32),
    "kd_engine_options_get": ([c_void_p, POINTER(EngineOptionsC)], c_int32),
    "kd_engine_weight_count": ([c_void_p], c_int32),
    "kd_engine_weight_info": ([c_void_p, c_int32, POINTER(WeightInfoC)], c_int32),
    "kd_slot_reset": ([c_void_p, c_int32], c_int32),
    "kd_slot_lengths": ([c_void_p, c_int32, POINTER(c_int32), POINTER(c_int32)], c_int32),
    "kd_prefill": ([c_void_p, c_int32, POINTER(c_int32), c_int32, POINTER(c_float), POINTER(c_float)], c_int32),
    "kd_forward": ([c_void_p, c_int32, c_int32, c_int32, POINTER(c_int32), POINTER(c_int32), POINTER(c_uint32),
                    c_int32, c_int32, POINTER(c_float), POINTER(c_float)], c_int32),
    "kd_slot_keep": ([c_void_p, c_int32, POINTER(c_int32), c_int32], c_int32),
    "kd_draft": ([c_void_p, c_int32, c_int32, POINTER(c_float), POINTER(c_int32), c_int32, POINTER(c_int32),
                  c_int32, POINTER(c_float)], c_int32),
    "kd_submit": ([c_void_p, POINTER(RequestC), POINTER(c_int64)], c_int32),
    "kd_cancel": ([c_void_p, c_int64], c_int32),
    "kd_step": ([c_void_p, c_int32, POINTER(StepReportC)], c_int32),
    "kd_request_get": ([c_void_p, c_int64, POINTER(RequestInfoC), POINTER(c_int32), c_int32], c_int32),
    "kd_release": ([c_void_p, c_int64], c_int32),
    "kd_philox4x32_10": ([POINTER(c_uint32), POINTER(c_uint32), POINTER(c_uint32)], None),
    "kd_nccl_unique_id": ([POINTER(c_uint8), c_char_p, c_size_t], c_int32),
    "kd_sim_group_create": ([c_int32, POINTER(c_void_p), c_char_p, c_size_t], c_int32),
    "kd_sim_group_free": ([c_void_p], None),
}


def library_path(variant: str = "gpu", build_dir: Path | None = None) -> Path:
    """Where the library is: $KDTREE_ENGINE_LIB (gpu variant), else the build directory."""
    if variant not in LIBRARY_NAMES:
        raise KdtreeError(f"native engine variant {variant!r}: choose gpu or emu")
    if variant == "gpu" and os.environ.get(ENV_LIBRARY):
        return Path(os.environ[ENV_LIBRARY])
    return (build_dir or DEFAULT_BUILD_DIR) / "lib" / LIBRARY_NAMES[variant]


@lru_cache(maxsize=None)
def load_library(path: Path) -> ctypes.CDLL:
    """dlopen the engine library and declare its functions (once per path)."""
    if not path.is_file():
        raise KdtreeError(f"the native engine library {path} is not built: run `kdtree build`")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise KdtreeError(f"cannot load the native engine library {path}: {exc}") from None
    for name, (args, res) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise KdtreeError(f"{path} has no {name}: it is older than this kdtree; rebuild with `kdtree build`") from None
        fn.argtypes = args
        fn.restype = res
    abi = lib.kd_abi_version()
    if abi != ABI_VERSION:
        raise KdtreeError(f"{path} speaks engine ABI {abi}, this kdtree expects {ABI_VERSION}: rebuild with `kdtree build`")
    return lib


def status_error(status: int, message: str) -> NativeError:
    kind = STATUS_NAMES.get(status, f"status {status}")
    return NativeError(status, f"native engine ({kind}): {message}")


ERROR_BYTES = 1024


def nccl_unique_id(variant: str = "gpu") -> bytes:
    """A fresh NCCL unique id (rank 0 makes it; every rank of a split model passes the same)."""
    lib = load_library(library_path(variant))
    buf = (c_uint8 * NCCL_ID_BYTES)()
    err = ctypes.create_string_buffer(ERROR_BYTES)
    status = lib.kd_nccl_unique_id(buf, err, ERROR_BYTES)
    if status != 0:
        raise status_error(status, err.value.decode(errors="replace"))
    return bytes(buf)


class SimGroup:
    """A simulated split (kd_sim_group): `world` parts of one model in this process on one
    GPU, each driven from its own thread; the engine runs them one after another and
    reduces in rank order. Free it after every engine created in it."""

    def __init__(self, world: int, variant: str = "gpu"):
        self._lib = load_library(library_path(variant))
        handle = c_void_p()
        err = ctypes.create_string_buffer(ERROR_BYTES)
        status = self._lib.kd_sim_group_create(world, ctypes.byref(handle), err, ERROR_BYTES)
        if status != 0:
            raise status_error(status, err.value.decode(errors="replace"))
        self.world = world
        self.handle = handle

    def close(self) -> None:
        if self.handle:
            self._lib.kd_sim_group_free(self.handle)
            self.handle = c_void_p()

    def __enter__(self) -> "SimGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
