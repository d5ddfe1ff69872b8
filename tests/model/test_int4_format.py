"""The INT4 format's arithmetic (python_engine/model/int4.py) against its oracles: packing,
unpacking and dequantization bit for bit equal to the compressed-tensors package's, the
worked example of docs/int4.md value for value, and quantization equal to an independent
numpy implementation of the rule docs/int4.md states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from python_engine.model.int4 import dequantize_int4, pack_int4, quantize_int4, unpack_int4

pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32  # noqa: E402
from int4_oracle import package_compress, w4a16_scheme  # noqa: E402


def test_pack_and_unpack_equal_the_packages(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (3, 5, 96), generator=g, dtype=torch.int8)  # [experts, out, in]
    assert q.min() == -8 and q.max() == 7  # both ends of the range, with overwhelming odds
    packed = pack_int4(q)
    assert packed.dtype == torch.int32 and packed.shape == (3, 5, 12)
    assert torch.equal(packed, pack_to_int32(q, 4))
    assert torch.equal(unpack_int4(packed, 96), q)
    assert torch.equal(unpack_int4(packed, 96), unpack_from_int32(packed, 4, torch.Size(q.shape)))
    # every int32 is a valid packing: unpacking random words must agree too
    words = torch.randint(-2**31, 2**31, (7, 4), generator=g, dtype=torch.int64).to(torch.int32)
    assert torch.equal(unpack_int4(words, 32), unpack_from_int32(words, 4, torch.Size((7, 32))))
    assert torch.equal(pack_int4(unpack_int4(words, 32)), words)


def test_dequantize_equals_the_packages_decompress(seed):
    g = torch.Generator().manual_seed(seed)
    out_f, in_f = 24, 128
    words = torch.randint(-2**31, 2**31, (out_f, in_f // 8), generator=g, dtype=torch.int64).to(torch.int32)
    # scales over several binades, so the bf16 rounding of the products is exercised
    scale = (torch.rand(out_f, in_f // 32, generator=g) * 2.0 ** torch.randint(-12, 2, (out_f, in_f // 32),
                                                                                  generator=g)).to(torch.bfloat16)
    ours = dequantize_int4(words, scale, in_f)
    ref = PackedQuantizationCompressor.decompress(
        {"weight_packed": words, "weight_scale": scale, "weight_shape": torch.tensor([out_f, in_f])},
        w4a16_scheme())["weight"]
    assert ours.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(ours.view(torch.int16), ref.view(torch.int16))  # bit for bit, signed zeros too
    # the product is rounded to bf16: with these scales float32 products differ somewhere
    exact = unpack_int4(words, in_f).float() * scale.float().repeat_interleave(32, -1)
    assert not torch.equal(exact, ours.float())


def test_the_worked_example_of_the_docs():
    q = torch.tensor([[-8, -7, -1, 0, 1, 2, 6, 7] + [3] * 24 + [0] * 32], dtype=torch.int8)
    packed = pack_int4(q)
    assert [w & 0xFFFFFFFF for w in packed[0].tolist()] == [0xFEA98710] + [0xBBBBBBBB] * 3 + [0x88888888] * 4
    assert packed[0].tolist()[:2] == [-22444272, -1145324613]
    assert packed.numpy().tobytes()[:4] == bytes([0x10, 0x87, 0xA9, 0xFE])
    scale = torch.tensor([[0.01, 0.5]], dtype=torch.bfloat16)
    assert scale[0, 0].item() == 0.010009765625
    w = dequantize_int4(packed, scale, 64)[0]
    assert w[:8].tolist() == [-0.080078125, -0.0703125, -0.010009765625, 0.0, 0.010009765625, 0.02001953125,
                              0.06005859375, 0.0703125]
    assert 7 * 0.010009765625 == 0.070068359375  # exact, but bf16 rounds it to 0.0703125
    assert w[8:32].tolist() == [0.030029296875] * 24 and w[32:].tolist() == [0.0] * 32


# --- quantization: an independent numpy implementation of docs/int4.md's rule -------------

def np_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), as float32 (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def np_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = w.shape
    groups = w.astype(np.float32).reshape(rows, cols // 32, 32)
    scale = np_bf16(np.abs(groups).max(-1) / np.float32(7.5))
    scale[scale == 0] = 2.0 ** -7
    q = np.clip(np.rint(groups / scale[..., None]), -8, 7).astype(np.int8)
    return q.reshape(rows, cols), scale


def np_pack(q: np.ndarray) -> np.ndarray:
    nib = (q.astype(np.int32) + 8).astype(np.uint32).reshape(q.shape[0], -1, 8)
    words = np.zeros(nib.shape[:2], dtype=np.uint32)
    for i in range(8):
        words |= nib[..., i] << np.uint32(4 * i)
    return words.view(np.int32)


def np_dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np_bf16(q.astype(np.float32) * np.repeat(scale, 32, axis=-1))  # exact product, then bf16


def random_bf16_weight(g: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    w = torch.randn(rows, cols, generator=g) * 0.05
    w[0, :32] = 0.0  # an all-zero group
    # absmax 0.9375 = 7.5 / 8: scale exactly 1/8, so -max is -7.5 -> -8 and +max 7.5 -> 8 -> 7
    w[1, :32] = w[1, :32].clamp(-0.9, 0.9)
    w[1, 3] = -0.9375
    w[1, 32:64] = w[1, 32:64].clamp(-0.9, 0.9)
    w[1, 40] = 0.9375
    # quotients exactly k + 0.5 (ties, to even): (k + 0.5) / 8 with the same scale 1/8
    w[2, :32] = (torch.randint(-7, 7, (32,), generator=g).float() + 0.5) / 8
    w[2, 0] = 0.9375
    w[3, 5] = 40.0  # an outlier: its group's other values round to 0
    return w.to(torch.bfloat16)


def test_quantize_equals_an_independent_numpy_quantization(seed):
    w = random_bf16_weight(torch.Generator().manual_seed(seed), 48, 128)
    q, scale = quantize_int4(w)
    q_np, scale_np = np_quantize(w.float().numpy())
    assert scale.dtype == torch.bfloat16
    assert np.array_equal(scale.float().numpy(), scale_np)
    assert np.array_equal(q.numpy(), q_np)
    assert np.array_equal(pack_int4(q).numpy(), np_pack(q_np))
    assert np.array_equal(dequantize_int4(pack_int4(q), scale, 128).float().numpy(), np_dequantize(q_np, scale_np))
    # the corners: an all-zero group, -max -> -8 and +max -> 7, ties to even, the outlier's group
    assert (q[0, :32] == 0).all() and q[1, 3] == -8 and q[1, 40] == 7
    k = (w[2, 1:32].float() * 8 - 0.5).round()  # the integer below each tie
    assert torch.equal(q[2, 1:32].float(), torch.where(k % 2 == 0, k, k + 1))
    assert q[3, 5] == 7 and (q[3, :32] == 0).sum() == 31


def test_quantize_scales_equal_the_packages_and_rounding_is_never_worse(seed):
    """The package quantizes with a bf16 division; ours divides in float32. Same scales, and
    our values are each at least as close to the weight (the package's may round a quotient
    that bf16 moved across a half)."""
    w = random_bf16_weight(torch.Generator().manual_seed(seed), 64, 96)
    q, scale = quantize_int4(w)
    theirs = package_compress(w)
    assert torch.equal(scale, theirs["weight_scale"])
    q_theirs = unpack_int4(theirs["weight_packed"], 96)
    s = scale.double().repeat_interleave(32, -1)
    ours_err = (w.double() - q.double() * s).abs()
    theirs_err = (w.double() - q_theirs.double() * s).abs()
    assert (ours_err <= theirs_err).all()
    assert (q == q_theirs).float().mean() > 0.9  # the same rule, apart from those quotients
