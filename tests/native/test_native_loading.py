"""The native engine's loading and its C API boundary, on the CPU through the
emulated build: the tensor table read from safetensors headers (byte ranges checked against
the safetensors package's own reading), Kimi's nested layout, every load error named by file
and tensor with nothing left allocated, bad configs and options refused by field, every C API
call's argument checks, and memory returned when engines are freed."""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from native_cases import DEMO_DRAFTER, DEMO_TARGET, rel
from safetensors.numpy import load_file, save_file

from python_engine.errors import KdtreeError
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_target
from python_engine.native import library as L
from python_engine.native.checkpoint_table import drafter_table, target_table
from python_engine.native.engine import NativeEngine, NativeOptions, device_memory

OPTS = NativeOptions(dtype="float32", max_slots=2, max_tokens=64, max_budget=8)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_random_target(tmp_path_factory.mktemp("tiny") / "t-seed5", tiny_config(), seed=5)


def variant_free(variant: str) -> int:
    return device_memory(0, variant)[0]


def test_table_byte_ranges_hold_the_tensors(native_variant):
    entries = target_table(DEMO_TARGET) + drafter_table(DEMO_DRAFTER)
    names = {e.name for e in entries}
    assert "model.embed_tokens.weight" in names and "drafter.fc.weight" in names
    assert not any(n.startswith("language_model.") for n in names)
    by_file: dict[Path, dict] = {}
    for e in entries[:: max(1, len(entries) // 25)]:  # a spread of tensors from every shard
        arrays = by_file.setdefault(e.file, {})
        if not arrays:
            import torch
            from safetensors.torch import load_file as load_torch

            arrays.update({k: v.float().numpy() for k, v in load_torch(str(e.file)).items()})
        raw = np.fromfile(e.file, dtype=np.uint8, count=e.nbytes, offset=e.offset)
        if e.dtype == "BF16":
            got = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            got = raw.view(np.float32)
        key = e.name.removeprefix("drafter.")
        assert np.array_equal(got.reshape(e.shape), arrays[key]), e.name


def kimi_layout(src: Path, dst: Path) -> Path:
    """The same weights as Kimi's multimodal release lays them out: text_config, language_model."""
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({"architectures": ["KimiVLForConditionalGeneration"],
                                                 "text_config": cfg}))
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update({"language_model." + k: v for k, v in load_file(str(f)).items()})
    tensors["vision_tower.patch_embed.weight"] = np.ones((4, 4), dtype=np.float32)  # ignored
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_kimi_layout_gives_the_same_logits(tiny, tmp_path, native_variant, rng):
    prompt = rng.integers(0, 96, 12).tolist()
    with NativeEngine(tiny, None, OPTS, variant=native_variant) as a:
        plain, _ = a.prefill(0, prompt)
    with NativeEngine(kimi_layout(tiny, tmp_path / "kimi"), None, OPTS, variant=native_variant) as b:
        nested, _ = b.prefill(0, prompt)
    assert rel(nested, plain) == 0.0


def broken_copy(src: Path, dst: Path, mutate) -> Path:
    shutil.copytree(src, dst)
    mutate(dst)
    return dst


def drop_tensor(name: str):
    def mutate(d: Path) -> None:
        f = next(d.glob("*.safetensors"))
        t = load_file(str(f))
        del t[name]
        save_file(t, str(f))
    return mutate


def reshape_tensor(name: str):
    def mutate(d: Path) -> None:
        f = next(d.glob("*.safetensors"))
        t = load_file(str(f))
        t[name] = np.ascontiguousarray(t[name].reshape(-1)[: t[name].size - 1])
        save_file(t, str(f))
    return mutate


def truncate(d: Path) -> None:
    f = next(d.glob("*.safetensors"))
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])


def as_float16(name: str):
    def mutate(d: Path) -> None:
        f = next(d.glob("*.safetensors"))
        t = load_file(str(f))
        t[name] = t[name].astype(np.float16)
        save_file(t, str(f))
    return mutate


def set_config(**values):
    def mutate(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(values)
        (d / "config.json").write_text(json.dumps(cfg))
    return mutate


LOAD_ERRORS = {
    "missing tensor": (drop_tensor("model.layers.1.mlp.experts.3.up_proj.weight"), "experts.3.up_proj.weight' is missing"),
    "wrong shape": (reshape_tensor("model.layers.0.self_attn.o_proj.weight"), "o_proj.weight' in .* has shape"),
    "truncated file": (truncate, "truncated"),
    "float16 tensor": (as_float16("model.norm.weight"), "norm.weight' in .*unsupported element type"),
    "latent wider than the cache": (set_config(kv_lora_rank=1024), "kv_lora_rank 1024 is over"),
    "rope too wide": (set_config(qk_rope_head_dim=128), "qk_rope_head_dim 128 must be even and <= 64"),
    "too many experts per token": (set_config(num_experts_per_tok=9), "num_experts_per_tok"),
}


@pytest.mark.parametrize("case", list(LOAD_ERRORS))
def test_load_errors_name_the_problem_and_free_everything(case, tiny, tmp_path, native_variant):
    mutate, pattern = LOAD_ERRORS[case]
    broken = broken_copy(tiny, tmp_path / "broken", mutate)
    before = variant_free(native_variant)
    with pytest.raises(KdtreeError, match=pattern):
        NativeEngine(broken, None, OPTS, variant=native_variant)
    assert variant_free(native_variant) == before, "a failed load left memory allocated"


@pytest.mark.parametrize("options,pattern", [
    (dict(max_slots=0), "max_slots 0 outside 1..256"),
    (dict(max_slots=1000), "max_slots 1000 outside"),
    (dict(max_budget=2000), "max_budget 2000 outside 0..1024"),
    (dict(max_tokens=0), "max_tokens must be >= 1"),
    (dict(prefill_chunk=5000), "prefill_chunk over"),
    (dict(dtype="float16"), "dtype 'float16'"),
    (dict(device=7), "device 7 does not exist"),
])
def test_bad_options_are_refused(options, pattern, native_variant):
    opts = NativeOptions(**{**OPTS.__dict__, **options})
    with pytest.raises(KdtreeError, match=pattern):
        NativeEngine(DEMO_TARGET, DEMO_DRAFTER, opts, variant=native_variant)


def test_abi_mismatch_is_refused(native_variant):
    lib = L.load_library(L.library_path(native_variant))
    opts = OPTS.to_c()
    opts.abi_version = 999
    err = ctypes.create_string_buffer(512)
    handle = ctypes.c_void_p()
    status = lib.kd_engine_create(None, None, None, 0, ctypes.byref(opts), L.PROGRESS_FN(), None,
                                  ctypes.byref(handle), err, 512)
    assert status == 1 and not handle  # no target config: refused before anything else
    from python_engine.model.config import load_target_config
    from python_engine.native.model_desc import describe

    desc = describe(load_target_config(DEMO_TARGET), None)
    status = lib.kd_engine_create(ctypes.byref(desc.target), None, None, 0, ctypes.byref(opts), L.PROGRESS_FN(),
                                  None, ctypes.byref(handle), err, 512)
    assert status == 1 and b"ABI 999" in err.value and not handle


@pytest.fixture(scope="module")
def engine(native_variant):
    with NativeEngine(DEMO_TARGET, DEMO_DRAFTER, OPTS, variant=native_variant) as eng:
        yield eng


CALL_ERRORS = {
    "reset slot -1": (lambda e: e.slot_reset(-1), "slots -1"),
    "reset slot past the last": (lambda e: e.slot_reset(2), "slots 2..2 outside"),
    "prefill empty": (lambda e: e.prefill(0, []), "at least one token"),
    "prefill token outside vocab": (lambda e: e.prefill(0, [1, 99999]), "token 99999 at index 1"),
    "prefill beyond max_tokens": (lambda e: e.prefill(1, list(range(65))), "max_tokens 64"),
    "forward tokens not 2-d": (lambda e: e.forward(0, [1, 2], [0, 1]), r"\[batch, T\]"),
    "forward too many rows": (lambda e: e.forward(0, np.ones((2, 300), int), np.zeros((2, 300), int)), "rows"),
    "forward negative position": (lambda e: e.forward(0, [[1]], [[-3]]), "negative position"),
    "forward vis too narrow": (lambda e: e.forward(0, np.ones((1, 40), int), np.arange(40)[None],
                                                   vis=np.ones((1, 40, 1), np.uint32)), "vis_words 1"),
    "keep without root": (lambda e: e.keep(0, [1, 2]), "accepted\\[0\\] must be 0"),
    "keep not increasing": (lambda e: e.keep(0, [0, 3, 2]), "increase"),
    "draft block too large": (lambda e: e.draft(0, [1], 40), "block_size 40 outside"),
    "draft bonus outside vocab": (lambda e: e.draft(0, [-4], 16), "bonus"),
    "draft features of the wrong width": (lambda e: e.draft(0, [1], 16, ctx_features=np.zeros((1, 2, 5))), "ctx_features"),
    "cancel unknown request": (lambda e: e.cancel(12345), "no request 12345"),
    "request unknown": (lambda e: e.request(777), "no request 777"),
}


@pytest.mark.parametrize("case", list(CALL_ERRORS))
def test_call_arguments_are_checked(case, engine):
    call, pattern = CALL_ERRORS[case]
    with pytest.raises(KdtreeError, match=pattern):
        call(engine)
    # the engine is still usable after every refusal
    engine.slot_reset(0)
    logits, _ = engine.prefill(0, [5, 6, 7])
    assert np.isfinite(logits).all()
    engine.slot_reset(0)


def test_null_pointers_at_the_c_boundary(engine):
    lib, h = engine.lib, engine._handle
    assert lib.kd_engine_memory(h, None) == 1
    assert lib.kd_step(h, 0, None) == 1
    assert lib.kd_submit(h, None, None) == 1
    assert lib.kd_draft(h, 0, 1, None, None, 0, None, 16, None) == 1
    assert lib.kd_engine_memory(None, None) == 1  # no engine at all


def test_step_without_requests_and_release_rules(engine):
    r = engine.step()
    assert (r.rounds, r.waiting, r.running) == (0, 0, 0)
    rid = engine.submit([5, 6, 7], 4, budget=4)
    with pytest.raises(KdtreeError, match="has not finished"):
        engine.release(rid)
    while engine.step().running or engine.request(rid).state == "waiting":
        pass
    assert engine.request(rid).state == "done"
    engine.release(rid)
    with pytest.raises(KdtreeError, match="no request"):
        engine.request(rid)


def test_closed_engine_refuses_calls(native_variant):
    eng = NativeEngine(DEMO_TARGET, DEMO_DRAFTER, OPTS, variant=native_variant)
    eng.close()
    eng.close()  # twice is fine
    with pytest.raises(KdtreeError, match="closed"):
        eng.prefill(0, [1, 2])


def test_memory_report_adds_up_and_comes_back(native_variant):
    before = variant_free(native_variant)
    a = NativeEngine(DEMO_TARGET, DEMO_DRAFTER, OPTS, variant=native_variant)
    m = a.memory()
    assert m["total"] == m["weights"] + m["target_cache"] + m["drafter_cache"] + m["workspace"]
    assert m["weights"] > 0 and m["target_cache"] > 0 and m["workspace"] > 0
    used = before - variant_free(native_variant)
    assert abs(used - m["total"]) <= 0.1 * m["total"], (used, m["total"])
    b = NativeEngine(DEMO_TARGET, DEMO_DRAFTER, OPTS, variant=native_variant)
    a.close()
    b.close()
    assert variant_free(native_variant) == before
