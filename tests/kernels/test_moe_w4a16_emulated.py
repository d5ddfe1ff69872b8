"""The W4A16 grouped expert GEMM (csrc/kernels/moe_gemm_w4a16.cu) on the CPU through the SIMT
emulator, against the torch reference of the dequantized experts (python_engine/model/int4.py:
w = bf16(q * scale), the reference that tests/model/test_int4_* check against the
compressed-tensors package).

Three programs, built by `kdtree build emu_tests` from the kernel's own source with the
emulator:
  * lib/emu/libmoe_w4a16_emu.so (csrc/kernels/emu/moe_w4a16_capi.cpp, C entry points called
    through ctypes): checkpoint-layout weights packed by `pack_int4`, repacked by the C++ loader
    function, multiplied by the kernel, compared with torch in float64;
  * bin/emu/test_moe_w4a16, the native GPU test program csrc/tests/test_moe_w4a16.cu (its own
    C++ reference), run on the emulator so that the program run on the H200 is checked in CI;
  * bin/emu/bench_moe (csrc/bench/bench_moe.cu) on a tiny layer, its records read by
    `kdtree bench moe`'s report.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from python_engine.model.int4 import dequantize_int4, pack_int4

GROUP = 32
# Per-element tolerance against float64: bf16 output rounding (unit roundoff 2^-8) plus
# float32 accumulation error, bounded by 2^-14 of sum |x w|; SwiGLU rounds four times
# (gate, up, silu, product) and silu' <= 1.1.
OUTPUT_ROUNDOFF = 2.0**-8
ACCUMULATION = 2.0**-14
SWIGLU_ROUNDOFF = 4 * OUTPUT_ROUNDOFF
SILU_SLOPE = 1.1
# A summary over the launch, max |err| / max |ref|, beside the per-element check above (the
# real gate). plain: the output rounding alone is 2^-9 of the largest value on average, 2^-8
# at worst. SwiGLU: its four roundings, SWIGLU_ROUNDOFF (an earlier 1e-2 failed at 1.05e-2
# with every element inside its own tolerance, seed 2490619544).
MAX_REL_PLAIN = 2e-3 * 2
MAX_REL_SWIGLU = SWIGLU_ROUNDOFF
POISON = 0x7FC1  # a bf16 NaN: an output still holding it was never written
ROW_TILES = {"auto": 0, "8": 8, "16": 16, "32": 32}

pytestmark = pytest.mark.slow  # the build (shared with the other emulator tests), then ~30 s of runs


def _toolchain():
    try:
        from kdtree_cli.native_build.toolchain import find_cuda, find_cxx

        return find_cuda(), find_cxx()
    except Exception as exc:  # no CUDA headers or no g++: nothing to build against
        pytest.skip(f"no CUDA toolkit / host compiler: {exc}")


@dataclass
class Built:
    capi: Path
    test_program: Path
    bench_program: Path


@pytest.fixture(scope="module")
def built() -> Built:
    _toolchain()
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest, build

    outcome = build(BuildRequest(targets=("emu_tests",)), console=Console(stderr=True, quiet=True))
    d = outcome.configured.build_dir
    return Built(d / "lib" / "emu" / "libmoe_w4a16_emu.so", d / "bin" / "emu" / "test_moe_w4a16",
                 d / "bin" / "emu" / "bench_moe")


class W4Lib:
    """ctypes view of moe_w4a16_capi.cpp: repack and the grouped GEMM on host arrays."""

    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path))
        p, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        lib.kd_w4a16_expert_words.argtypes = [i32, i32]
        lib.kd_w4a16_expert_words.restype = i64
        lib.kd_w4a16_repack.argtypes = [p, p, i32, i32, p, ctypes.c_char_p, i32]
        lib.kd_w4a16_gemm.argtypes = [i32] * 9 + [p, i64, p, p, p, p, p, i64, p, i64, ctypes.c_char_p, i32]
        self.lib = lib

    def expert_words(self, n: int, k: int) -> int:
        return self.lib.kd_w4a16_expert_words(n, k)

    def repack(self, packed: torch.Tensor, scale: torch.Tensor, k: int) -> np.ndarray:
        """[E, n, k/8] int32 + [E, n, k/32] bf16 -> uint32 [E, expert_words(n, k)]."""
        experts, n = packed.shape[:2]
        out = np.zeros((experts, self.expert_words(n, k)), dtype=np.uint32)
        err = ctypes.create_string_buffer(512)
        for e in range(experts):
            pk = np.ascontiguousarray(packed[e].numpy())
            sc = np.ascontiguousarray(scale[e].view(torch.int16).numpy())
            status = self.lib.kd_w4a16_repack(pk.ctypes.data, sc.ctypes.data, n, k, out[e].ctypes.data, err, 512)
            assert status == 0, err.value.decode()
        return out

    def gemm(self, *, x: torch.Tensor, x_row: np.ndarray | None, offsets: np.ndarray, w: np.ndarray,
             w_up: np.ndarray | None, n: int, k: int, out_stride: int | None = None, row_tile: int = 0,
             k_slices: int = 0, max_rows_per_expert: int = 0, x_ptr_offset: int = 0,
             x_source: int = 0, cta_warps: int = 0, active: bool = False) -> tuple[int, str, torch.Tensor]:
        """(status, message, out bf16 [rows, out_stride]) of one launch; x is [tokens, x_stride] bf16.
        active: pass the list of experts that own rows (as moe_group makes it) instead of letting
        each CTA find its expert in offsets."""
        rows = int(offsets[-1])
        out_stride = out_stride or n
        out = np.full((max(rows, 1), out_stride), POISON, dtype=np.uint16)
        xn = np.ascontiguousarray(x.view(torch.int16).numpy())
        offsets = np.ascontiguousarray(offsets, dtype=np.int32)
        rows_ptr = None
        if x_row is not None:
            x_row = np.ascontiguousarray(x_row, dtype=np.int32)
            rows_ptr = x_row.ctypes.data
        active_list = None
        if active:
            owners = np.flatnonzero(np.diff(offsets) > 0).astype(np.int32)
            active_list = np.full(w.shape[0], -1, dtype=np.int32)
            active_list[: len(owners)] = owners
        err = ctypes.create_string_buffer(512)
        status = self.lib.kd_w4a16_gemm(
            w.shape[0], rows, n, k, max_rows_per_expert, row_tile, k_slices, x_source, cta_warps,
            xn.ctypes.data + x_ptr_offset,
            x.shape[1],
            rows_ptr, offsets.ctypes.data, None if active_list is None else active_list.ctypes.data,
            w.ctypes.data, None if w_up is None else w_up.ctypes.data, w.shape[1],
            out.ctypes.data, out_stride, err, 512)
        return status, err.value.decode(), torch.from_numpy(out[:rows].view(np.int16)).view(torch.bfloat16)


@pytest.fixture(scope="module")
def w4(built) -> W4Lib:
    return W4Lib(built.capi)


@dataclass
class Experts:
    """One projection of every expert as the checkpoint stores it, and its reference weight."""

    q: torch.Tensor  # int8 [E, n, k] in -8..7
    packed: torch.Tensor  # int32 [E, n, k / 8]
    scale: torch.Tensor  # bf16 [E, n, k / 32]
    weight: torch.Tensor  # bf16 [E, n, k] = dequantize_int4(packed, scale)


def random_experts(gen: torch.Generator, experts: int, n: int, k: int) -> Experts:
    q = torch.randint(-8, 8, (experts, n, k), generator=gen, dtype=torch.int8)
    # scales as the quantizer makes them (absmax / 7.5 of ~N(0, 0.02) weights), all mantissas
    scale = (torch.rand(experts, n, k // GROUP, generator=gen) * 0.018 + 0.002).to(torch.bfloat16)
    packed = pack_int4(q)
    return Experts(q, packed, scale, dequantize_int4(packed, scale, k))


def ragged_counts(rng: np.random.Generator, experts: int) -> np.ndarray:
    """Random rows per expert with a 0, a 1, one in 17..32 and one over 32 (several passes)."""
    counts = rng.integers(0, 12, experts)
    forced = rng.permutation(experts)[:4]
    counts[forced] = [0, 1, rng.integers(17, 33), rng.integers(33, 72)]
    return counts


def reference(x_rows: torch.Tensor, w: torch.Tensor, u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 output of rows x_rows [r, k] through one expert, and its per-element tolerance."""
    xd, wd = x_rows.double(), w.double()
    g, g_abs = xd @ wd.T, xd.abs() @ wd.abs().T
    if u is None:
        return g, OUTPUT_ROUNDOFF * g.abs() + ACCUMULATION * g_abs
    ud = u.double()
    up, u_abs = xd @ ud.T, xd.abs() @ ud.abs().T
    silu = torch.nn.functional.silu(g)
    v = silu * up
    return v, SWIGLU_ROUNDOFF * v.abs() + SILU_SLOPE * up.abs() * ACCUMULATION * g_abs + silu.abs() * ACCUMULATION * u_abs


def check_against_reference(out: torch.Tensor, x: torch.Tensor, x_row: np.ndarray, offsets: np.ndarray,
                            gate: Experts, up: Experts | None, n: int) -> float:
    """Every row within tolerance; returns max |err| / max |ref| over the launch."""
    worst = ref_max = 0.0
    for e in range(len(offsets) - 1):
        a, b = int(offsets[e]), int(offsets[e + 1])
        if a == b:
            continue
        ref, tol = reference(x[torch.from_numpy(x_row[a:b]).long(), : gate.weight.shape[2]],
                             gate.weight[e], None if up is None else up.weight[e])
        got = out[a:b, :n].double()
        assert not got.isnan().any(), f"expert {e}: rows {a}..{b - 1} have outputs never written (NaN)"
        err = (got - ref).abs()
        bad = (err > tol).nonzero()
        assert len(bad) == 0, (f"expert {e}: {len(bad)} of {err.numel()} outputs off; first at row {a + int(bad[0, 0])} "
                               f"col {int(bad[0, 1])}: got {got[tuple(bad[0])].item()}, want {ref[tuple(bad[0])].item()}")
        worst, ref_max = max(worst, err.max().item()), max(ref_max, ref.abs().max().item())
    return worst / ref_max


@pytest.mark.parametrize("k_slices", [0, 1, 2, 4], ids=lambda s: f"slices{s or '-auto'}")
@pytest.mark.parametrize("form", ["plain", "swiglu"])
@pytest.mark.parametrize("n,k", [(64, 256), (80, 224), (48, 96)], ids=["aligned", "n%16,k%64=32", "small"])
def test_ragged_routing_matches_dequantized_reference(w4, seed, form, n, k, k_slices):
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, tokens = 10, 64
    gate = random_experts(gen, experts, n, k)
    up = random_experts(gen, experts, n, k) if form == "swiglu" else None
    counts = ragged_counts(rng, experts)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    x_row = rng.integers(0, tokens, int(offsets[-1])).astype(np.int32)
    x = torch.randn(tokens, k + 16, generator=gen).to(torch.bfloat16)  # rows longer than k
    status, message, out = w4.gemm(x=x, x_row=x_row, offsets=offsets, w=w4.repack(gate.packed, gate.scale, k),
                                   w_up=None if up is None else w4.repack(up.packed, up.scale, k), n=n, k=k,
                                   out_stride=n + 5, k_slices=k_slices)
    assert status == 0, message
    assert (out[:, n:].view(torch.int16) == np.int16(POISON)).all(), "wrote past n"
    rel = check_against_reference(out, x, x_row, offsets, gate, up, n)
    assert rel <= (MAX_REL_PLAIN if up is None else MAX_REL_SWIGLU), rel


def test_decode_routing_top8_over_many_experts(w4, seed):
    """A decode-like launch: 6 tokens, top-8 of 48 experts (most own no rows), gathered x rows."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, tokens, topk, n, k = 48, 6, 8, 32, 128
    gate, up = random_experts(gen, experts, n, k), random_experts(gen, experts, n, k)
    ids = np.stack([rng.permutation(experts)[:topk] for _ in range(tokens)])
    order = np.argsort(ids.reshape(-1), kind="stable")
    x_row = (order // topk).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(ids.reshape(-1), minlength=experts))]).astype(np.int32)
    x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16)
    wg, wu = w4.repack(gate.packed, gate.scale, k), w4.repack(up.packed, up.scale, k)
    status, message, out = w4.gemm(x=x, x_row=x_row, offsets=offsets, w=wg, w_up=wu, n=n, k=k,
                                   max_rows_per_expert=tokens)
    assert status == 0, message
    check_against_reference(out, x, x_row, offsets, gate, up, n)
    # the engine's way: each CTA takes its expert from moe_group's list (the same experts, the same bits)
    status, message, listed = w4.gemm(x=x, x_row=x_row, offsets=offsets, w=wg, w_up=wu, n=n, k=k,
                                      max_rows_per_expert=tokens, active=True)
    assert status == 0, message
    assert torch.equal(listed.view(torch.int16), out.view(torch.int16))


def test_row_tiles_and_gather_do_not_change_results(w4, seed):
    """Bit-identical outputs whatever the row tile, and with x rows gathered or laid out in order."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, n, k = 6, 48, 192
    gate, up = random_experts(gen, experts, n, k), random_experts(gen, experts, n, k)
    wg, wu = w4.repack(gate.packed, gate.scale, k), w4.repack(up.packed, up.scale, k)
    offsets = np.concatenate([[0], np.cumsum(ragged_counts(rng, experts))]).astype(np.int32)
    rows = int(offsets[-1])
    x = torch.randn(rows, k, generator=gen).to(torch.bfloat16)
    outs = {}
    for name, tile in ROW_TILES.items():
        status, message, outs[name] = w4.gemm(x=x, x_row=None, offsets=offsets, w=wg, w_up=wu, n=n, k=k, row_tile=tile)
        assert status == 0, message
    for name in ROW_TILES:
        assert torch.equal(outs[name].view(torch.int16), outs["auto"].view(torch.int16)), f"row tile {name}"
    perm = rng.permutation(rows).astype(np.int32)  # x rows scattered, gathered back through x_row
    inverse = np.argsort(perm).astype(np.int32)
    status, message, gathered = w4.gemm(x=x[torch.from_numpy(perm).long()], x_row=inverse, offsets=offsets, w=wg,
                                        w_up=wu, n=n, k=k)
    assert status == 0, message
    assert torch.equal(gathered.view(torch.int16), outs["auto"].view(torch.int16))
    check_against_reference(outs["auto"], x, np.arange(rows, dtype=np.int32), offsets, gate, up, n)


@pytest.mark.parametrize("k", [256, 224], ids=["k%64=0", "k%64=32"])
def test_plain_gemm_one_or_two_slices_give_the_same_bits(w4, seed, k):
    """The plain GEMM sums its chunks in two interleaved classes with one slice as with two, so
    the planner may run either for a launch (the down GEMM under the slot hand-off runs two at
    single-token decode, one at verify sizes: DDTree == AR needs the same bits)."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, n = 6, 48
    down = random_experts(gen, experts, n, k)
    # chunk 2 (columns 128..191) cancels chunk 0 exactly at 2^14 times the other chunks'
    # magnitude: summed in one chain, chunk 1 is added to chunk 0's large partial sum and loses
    # its low bits, in two classes it is not, so a kernel that kept one chain would differ
    q = down.q.clone()
    q[..., 128:192] = q[..., 0:64]
    scale = down.scale.clone()
    scale[..., 4:6] = scale[..., 0:2]
    packed = pack_int4(q)
    down = Experts(q, packed, scale, dequantize_int4(packed, scale, k))
    w = w4.repack(down.packed, down.scale, k)
    offsets = np.concatenate([[0], np.cumsum(ragged_counts(rng, experts))]).astype(np.int32)
    x = torch.randn(int(offsets[-1]), k, generator=gen)
    x[:, 0:64] *= 2.0**14
    x = x.to(torch.bfloat16)
    x[:, 128:192] = -x[:, 0:64]
    outs = {}
    for slices in (1, 2):
        for name, tile in ROW_TILES.items():
            status, message, outs[slices, name] = w4.gemm(x=x, x_row=None, offsets=offsets, w=w, w_up=None, n=n, k=k,
                                                          k_slices=slices, row_tile=tile)
            assert status == 0, message
    for key, out in outs.items():
        assert torch.equal(out.view(torch.int16), outs[1, "auto"].view(torch.int16)), f"slices, row tile {key}"
    check_against_reference(outs[1, "auto"], x, np.arange(x.shape[0], dtype=np.int32), offsets, down, None, n)


X_SOURCES = {"auto": 0, "global": 1, "shared": 2}


@pytest.mark.parametrize("bound", [1, 3, 8], ids=lambda b: f"max_rows{b}")
@pytest.mark.parametrize("form", ["plain", "swiglu"])
def test_x_staged_in_shared_memory_does_not_change_results(w4, seed, form, bound):
    """x read from global memory or staged in shared memory, for every slice count and (one slice)
    CTAs of 4 and 8 warps: bit-identical outputs, right against the reference. The staged rows per pass follow max_rows_per_expert (the
    8-row tile's bound); below the real load (experts own up to 71 rows here) the kernel takes more
    passes, and the results must not change."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, tokens, n, k = 7, 40, 48, 224  # k % 64 == 32: the tail chunk reads its lower half
    gate = random_experts(gen, experts, n, k)
    up = random_experts(gen, experts, n, k) if form == "swiglu" else None
    wg = w4.repack(gate.packed, gate.scale, k)
    wu = None if up is None else w4.repack(up.packed, up.scale, k)
    offsets = np.concatenate([[0], np.cumsum(ragged_counts(rng, experts))]).astype(np.int32)
    x_row = rng.integers(0, tokens, int(offsets[-1])).astype(np.int32)
    x = torch.randn(tokens, k + 8, generator=gen).to(torch.bfloat16)
    one_slice = {}  # CTAs of 4 and 8 warps: the same warps' work, so the same bits
    four_slices = {}  # 4 slices: CTAs of one row tile (4 warps) or two (8)
    for slices, cta_warps in ((1, 4), (1, 8), (2, 0), (4, 0), (4, 4)):
        outs = {}
        for name, source in X_SOURCES.items():
            status, message, outs[name] = w4.gemm(x=x, x_row=x_row, offsets=offsets, w=wg, w_up=wu, n=n, k=k,
                                                  k_slices=slices, max_rows_per_expert=bound,
                                                  x_source=source, cta_warps=cta_warps, active=source == 2)
            assert status == 0, message
        for name in X_SOURCES:
            assert torch.equal(outs[name].view(torch.int16), outs["global"].view(torch.int16)), (name, slices)
        check_against_reference(outs["shared"], x, x_row, offsets, gate, up, n)
        if slices == 1:
            one_slice[cta_warps] = outs["global"]
        if slices == 4:
            four_slices[cta_warps] = outs["global"]
    assert torch.equal(one_slice[4].view(torch.int16), one_slice[8].view(torch.int16))
    assert torch.equal(four_slices[4].view(torch.int16), four_slices[0].view(torch.int16))


def test_one_hot_rows_show_each_weight_rounded_to_bf16(w4, seed):
    """x rows with one nonzero column c: out = bf16(x_c * w[col, c]) exactly. That holds only if
    each weight is bf16(q * scale) before the product: with q * scale unrounded some differ."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    experts, n, k, tokens = 3, 64, 128, 32
    gate = random_experts(gen, experts, n, k)
    hot = rng.integers(0, k, tokens)
    x = torch.zeros(tokens, k, dtype=torch.bfloat16)
    x[torch.arange(tokens), torch.from_numpy(hot)] = (torch.rand(tokens, generator=gen) * 3 + 1).to(torch.bfloat16)
    counts = np.array([12, 0, 20])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    x_row = rng.integers(0, tokens, int(offsets[-1])).astype(np.int32)
    status, message, out = w4.gemm(x=x, x_row=x_row, offsets=offsets, w=w4.repack(gate.packed, gate.scale, k),
                                   w_up=None, n=n, k=k)
    assert status == 0, message
    expert_of_row = np.repeat(np.arange(experts), counts)
    cols = torch.from_numpy(hot[x_row]).long()
    xv = x[torch.from_numpy(x_row).long(), cols].float()  # [rows]
    rounded = gate.weight[torch.from_numpy(expert_of_row).long(), :, cols].float()  # [rows, n]
    want = (xv[:, None] * rounded).to(torch.bfloat16)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    unrounded = gate.q.double() * gate.scale.double().repeat_interleave(GROUP, -1)
    alt = (xv[:, None].double() * unrounded[torch.from_numpy(expert_of_row).long(), :, cols]).to(torch.bfloat16)
    assert not torch.equal(alt.view(torch.int16), want.view(torch.int16)), "the check could not fail"


def test_repack_follows_the_documented_layout(w4, seed):
    """moe_w4a16_repack against the layout as moe_gemm_w4a16.cuh documents it, written out here."""
    gen = torch.Generator().manual_seed(seed)
    n, k = 40, 160  # padding in both directions
    e = random_experts(gen, 1, n, k)
    got = w4.repack(e.packed, e.scale, k)[0]
    nib = ((e.packed[0].unsqueeze(-1) >> torch.arange(0, 32, 4)) & 0xF).reshape(n, k).numpy()
    scale_bits = e.scale[0].view(torch.int16).numpy().astype(np.uint32) & 0xFFFF
    tiles, chunks = -(-n // 16), -(-k // 64)
    want = np.zeros(tiles * chunks * 144, dtype=np.uint32)
    for t in range(tiles):
        for c in range(chunks):
            base = (t * chunks + c) * 144
            for lane in range(32):
                g, quad = divmod(lane, 4)
                for s in range(4):
                    word = 0
                    for pos in range(8):
                        i, half = pos % 4, pos // 4
                        row, col = 16 * t + g + 8 * (i % 2), 64 * c + 16 * quad + 4 * s + 2 * (i // 2) + half
                        value = nib[row, col] if row < n and col < k else 8
                        word |= int(value) << (4 * pos)
                    want[base + 4 * lane + s] = word
            for h in range(2):
                for g in range(8):
                    lo = scale_bits[16 * t + g, 2 * c + h] if 16 * t + g < n and 2 * c + h < k // 32 else 0
                    hi = scale_bits[16 * t + g + 8, 2 * c + h] if 16 * t + g + 8 < n and 2 * c + h < k // 32 else 0
                    want[base + 128 + 8 * h + g] = int(lo) | (int(hi) << 16)
    assert np.array_equal(got, want)


def test_bad_arguments_are_reported(w4):
    gen = torch.Generator().manual_seed(0)
    gate = random_experts(gen, 2, 32, 64)
    w = w4.repack(gate.packed, gate.scale, 64)
    x = torch.randn(4, 64, generator=gen).to(torch.bfloat16)
    offsets = np.array([0, 2, 4], dtype=np.int32)
    status, message, _ = w4.gemm(x=x, x_row=None, offsets=offsets, w=w, w_up=None, n=32, k=48)
    assert status == 1 and "group size" in message, message
    status, message, _ = w4.gemm(x=x, x_row=None, offsets=offsets, w=w, w_up=None, n=32, k=64, x_ptr_offset=2)
    assert status == 1 and "16-byte aligned" in message, message
    status, message, _ = w4.gemm(x=x, x_row=None, offsets=offsets, w=w, w_up=None, n=32, k=64, row_tile=12)
    assert status == 1 and "row_tile 12" in message, message
    status, message, _ = w4.gemm(x=x, x_row=None, offsets=offsets, w=w, w_up=None, n=32, k=64, k_slices=3)
    assert status == 1 and "k_slices 3" in message, message
    err = ctypes.create_string_buffer(512)
    dst = np.zeros(w4.expert_words(32, 64), dtype=np.uint32)
    pk = gate.packed[0].numpy()
    status = w4.lib.kd_w4a16_repack(pk.ctypes.data, pk.ctypes.data, 32, 60, dst.ctypes.data, err, 512)
    assert status == 1 and b"multiple of 32" in err.value


def test_native_test_program_on_emulator(built):
    """csrc/tests/test_moe_w4a16.cu, the program the H200 runs, on the emulator (its small cases)."""
    proc = subprocess.run([str(built.test_program)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KDTREE_SANITIZE_QUICK": "1"})
    out = proc.stdout + proc.stderr
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert proc.returncode == 0 and last.startswith("7 passed, 0 failed"), out[-4000:]


def test_bench_program_on_emulator(built, tmp_path, seed):
    """bench_moe on a tiny layer: every implementation timed at every n, the distinct experts and
    the bytes per expert as the routing and the tile layout say, and the report built from it."""
    from kdtree_cli.bench import moe
    from python_engine.kdtr import write_kdtr

    shape, tokens, sets = moe.MoeShape(experts=12, hidden=128, inter=64, topk=3), (1, 5, 24), 2
    routing = moe.routing_tensors(shape, tokens, sets, seed)
    path = write_kdtr(tmp_path / "routing.kdtr", routing)
    proc = subprocess.run([str(built.bench_program), "--routing", str(path), "--reps", "2", "--warm", "1",
                           "--copy-mib", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    shape_rec = next(r for r in records if r["kind"] == "shape")
    words = lambda n, k: -(-n // 16) * -(-k // 64) * 144  # noqa: E731  (moe_gemm_w4a16.cuh)
    assert shape_rec["int4_expert_bytes"] == 4 * (2 * words(64, 128) + words(128, 64))
    assert shape_rec["bf16_expert_bytes"] == 2 * 3 * 64 * 128
    moe_recs = [r for r in records if r["kind"] == "moe"]
    assert {(r["tokens"], r["impl"]) for r in moe_recs} == {
        (n, impl) for n in tokens for impl in ("int4", "int4_tile8", "int4_tile16", "int4_tile32", "int4_slices1",
                                              "int4_slices2", "int4_slices4", "int4_gate_up_slices2", "int4_serial",
                                              "int4_xglobal", "int4_xshared", "int4_down_xshared", "int4_cta8",
                                              "int4_scan", "int4_cta4", "int4_gridwait", "bf16")}
    for r in moe_recs:
        ids = [routing[f"n{r['tokens']}.s{s}.topk_ids"] for s in range(sets)]
        assert r["distinct_experts"] == pytest.approx(np.mean([len(np.unique(i)) for i in ids]), abs=0.01)
        assert r["max_rows_per_expert"] == max(np.bincount(i.reshape(-1)).max() for i in ids)
        assert r["ms"] > 0 and r["gate_up_ms"] > 0 and r["down_ms"] > 0
    facts, rows = moe.compose(records, None, "SIMT emulator")
    assert [row.tokens for row in rows] == list(tokens)
    assert all(row.int4_floor_ms > 0 and row.bf16_floor_ms > row.int4_floor_ms for row in rows)
