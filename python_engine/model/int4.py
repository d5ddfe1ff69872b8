"""INT4 routed-expert weights as Kimi K2.6 ships them: compressed-tensors `pack-quantized`,
symmetric, one bfloat16 scale per group of 32 input columns (docs/int4.md has the layout).

One linear layer `<module>` (weight [out, in] in bf16 terms) is stored as three tensors:
    <module>.weight_packed  int32 [out, in / 8]   eight 4-bit values per word, value + 8
    <module>.weight_scale   bf16  [out, in / 32]  one scale per row and group of 32 columns
    <module>.weight_shape   int   [2]             [out, in]
and its weight is  w[r, c] = bf16(q[r, c] * scale[r, c // 32]),  q in -8..7: the product is
taken in bfloat16 (the scale's dtype), as the compressed-tensors package dequantizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from python_engine.errors import KdtreeError
from python_engine.model.checkpoint import Checkpoint
from python_engine.model.quant_config import BITS, GROUP_SIZE

PER_WORD = 32 // BITS  # values per int32 word
OFFSET = 1 << (BITS - 1)  # stored nibble = value + 8, so -8..7 becomes 0..15
Q_MIN, Q_MAX = -OFFSET, OFFSET - 1
SCALE_DTYPE = torch.bfloat16
# compressed-tensors' symmetric min-max observer divides the group's absolute maximum by half
# the integer range, (Q_MAX - Q_MIN) / 2 = 7.5, so +max rounds to 8 and clips to 7.
SCALE_DIVISOR = (Q_MAX - Q_MIN) / 2
# a group of zeros gets this scale instead of 0 (any nonzero scale gives q = 0; the package
# uses its scale dtype's eps)
ZERO_GROUP_SCALE = torch.finfo(SCALE_DTYPE).eps

_SHIFTS = torch.arange(0, 32, BITS, dtype=torch.int32)  # bit offset of each of a word's 8 values


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 values in -8..7, [..., cols] with cols % 8 == 0 -> int32 [..., cols / 8]; value
    c of a row lands in word c // 8 at bits 4 * (c % 8) (lowest nibble first)."""
    if q.shape[-1] % PER_WORD:
        raise ValueError(f"pack_int4: {q.shape[-1]} columns is not a multiple of {PER_WORD}")
    u = (q.to(torch.int32) + OFFSET).unflatten(-1, (q.shape[-1] // PER_WORD, PER_WORD))
    word = torch.zeros(u.shape[:-1], dtype=torch.int32)
    for i in range(PER_WORD):  # int32 shifts wrap into the sign bit, as the stored words do
        word |= u[..., i] << int(_SHIFTS[i])
    return word


def unpack_int4(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """int32 [..., words] -> int8 [..., cols] in -8..7 (the inverse of pack_int4)."""
    nibbles = (packed.unsqueeze(-1) >> _SHIFTS) & 0xF  # arithmetic shift, then mask: sign-safe
    return (nibbles.flatten(-2)[..., :cols] - OFFSET).to(torch.int8)


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, cols: int) -> torch.Tensor:
    """The bf16 weight [..., cols]: each value times its group's scale, rounded to bf16."""
    q = unpack_int4(packed, cols)
    return q.to(scale.dtype) * scale.repeat_interleave(GROUP_SIZE, dim=-1)


def quantize_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Round-to-nearest INT4 of a float weight [..., cols] (cols % 32 == 0): (q int8 [..., cols],
    scale bf16 [..., cols / 32]). scale = bf16(absmax / 7.5) per group; q = clamp(round(w / scale))
    computed in float32 with the stored (bf16) scale, ties to even."""
    if w.shape[-1] % GROUP_SIZE:
        raise ValueError(f"quantize_int4: {w.shape[-1]} columns is not a multiple of {GROUP_SIZE}")
    groups = w.float().unflatten(-1, (w.shape[-1] // GROUP_SIZE, GROUP_SIZE))
    scale = (groups.abs().amax(-1) / SCALE_DIVISOR).to(SCALE_DTYPE)
    scale = torch.where(scale == 0, torch.tensor(ZERO_GROUP_SCALE, dtype=SCALE_DTYPE), scale)
    q = torch.round(groups / scale.float().unsqueeze(-1)).clamp(Q_MIN, Q_MAX)
    return q.to(torch.int8).flatten(-2), scale


@dataclass
class Int4Linear:
    """One INT4 linear layer as stored: packed words, scales and its [out, in] shape."""

    packed: torch.Tensor  # int32 [out, in / 8]
    scale: torch.Tensor  # bf16 [out, in / 32]
    shape: tuple[int, int]  # (out, in)

    def dequantize(self) -> torch.Tensor:
        return dequantize_int4(self.packed, self.scale, self.shape[1])

    @classmethod
    def from_weight(cls, w: torch.Tensor) -> "Int4Linear":
        q, scale = quantize_int4(w)
        return cls(pack_int4(q), scale, (w.shape[0], w.shape[1]))

    def tensors(self, module: str) -> dict[str, torch.Tensor]:
        """The checkpoint tensors of `module` (weight_shape int64, as compressed-tensors writes)."""
        return {f"{module}.weight_packed": self.packed, f"{module}.weight_scale": self.scale,
                f"{module}.weight_shape": torch.tensor(self.shape, dtype=torch.int64)}


def read_int4_linear(ckpt: Checkpoint, module: str, out_features: int, in_features: int) -> Int4Linear:
    """Read and check `<module>.weight_{packed,scale,shape}`; every mismatch is a KdtreeError
    naming the file and the tensor."""
    packed_name = f"{module}.weight_packed"
    if packed_name not in ckpt:
        hint = ""
        if f"{module}.weight" in ckpt:
            hint = (f" (the checkpoint has a float '{ckpt.prefix}{module}.weight' instead: its "
                    "quantization_config says INT4 for a module stored unquantized)")
        raise KdtreeError(f"checkpoint {ckpt.directory}: tensor '{ckpt.prefix}{packed_name}' is missing{hint}")
    packed = ckpt.read(packed_name, (out_features, in_features // PER_WORD))
    _need_dtype(ckpt, packed_name, packed, torch.int32, "eight 4-bit values per int32 word")
    scale_name = f"{module}.weight_scale"
    scale = ckpt.read(scale_name, (out_features, in_features // GROUP_SIZE))
    _need_dtype(ckpt, scale_name, scale, SCALE_DTYPE, f"one bfloat16 scale per {GROUP_SIZE} columns")
    shape_name = f"{module}.weight_shape"
    stored = ckpt.read(shape_name)
    if stored.dtype.is_floating_point or stored.dtype == torch.bool or stored.tolist() != [out_features, in_features]:
        raise KdtreeError(
            f"checkpoint file {ckpt.file_of(shape_name)}: tensor '{ckpt.prefix}{shape_name}' is "
            f"{stored.tolist()} ({stored.dtype}), expected the integers [{out_features}, {in_features}]"
        )
    return Int4Linear(packed, scale, (out_features, in_features))


def _need_dtype(ckpt: Checkpoint, name: str, t: torch.Tensor, dtype: torch.dtype, why: str) -> None:
    if t.dtype != dtype:
        raise KdtreeError(
            f"checkpoint file {ckpt.file_of(name)}: tensor '{ckpt.prefix}{name}' has dtype {t.dtype}, "
            f"expected {dtype} ({why})"
        )
