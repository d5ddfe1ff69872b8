"""`kdtree quantize`: a bf16 DeepSeek-V3 / Kimi checkpoint in, the same model with INT4 routed
experts out, in the format Kimi K2.6 ships (python_engine/model/int4.py, docs/int4.md).

Routed experts are quantized round-to-nearest (python_engine.model.int4.quantize_int4);
every other tensor is copied as stored. The output is written into a temporary folder next
to DST and renamed into place only when complete, so DST is either the finished checkpoint
or untouched. Memory stays near one output shard: tensors are read one at a time from the
source files and each shard is written as soon as it is full.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from python_engine.errors import KdtreeError
from python_engine.model.checkpoint import INDEX_NAME, Checkpoint
from python_engine.model.config import load_target_config
from python_engine.model.int4 import Int4Linear
from python_engine.model.quant_config import (GROUP_SIZE, QUANT_METHOD, int4_quantization_config,
                                              int4_scheme_from_config, linear_modules)
from python_engine.model.target_loader import detect_prefix

DEFAULT_SHARD_BYTES = 4 << 30  # per output file; the demo pair uses less (python_engine/train/export.py)
# files of the source that are rewritten rather than copied
REWRITTEN = ("config.json", INDEX_NAME)

Progress = Callable[[int, int], None]  # (source bytes done, source bytes in all)


@dataclass
class QuantizeSummary:
    destination: Path
    quantized: int  # linear layers written INT4
    copied: int  # tensors copied unchanged
    shards: int
    bytes_in: int  # source tensor bytes
    bytes_out: int  # written tensor bytes


def quantize_checkpoint(src: str | Path, dst: str | Path, *, force: bool = False,
                        shard_bytes: int = DEFAULT_SHARD_BYTES, progress: Progress | None = None) -> QuantizeSummary:
    """Write an INT4 copy of checkpoint `src` to `dst` (which must not exist unless `force`)."""
    src, dst = Path(src), Path(dst)
    cfg = load_target_config(src)
    if cfg.quantization is not None:
        raise KdtreeError(f"{src}/config.json already declares a {QUANT_METHOD} quantization_config: "
                          "quantize a bf16 checkpoint")
    for what, n in (("hidden_size", cfg.hidden_size), ("moe_intermediate_size", cfg.moe_intermediate_size)):
        if n % GROUP_SIZE:
            raise KdtreeError(f"{src}/config.json: {what} = {n} is not a multiple of the INT4 group size {GROUP_SIZE}")
    if shard_bytes < 1:
        raise KdtreeError(f"shard size must be positive, got {shard_bytes} bytes")
    _check_destination(src, dst, force)

    ckpt = Checkpoint(src)
    prefix = detect_prefix(ckpt)  # for the names below; tensors are then read by full name
    qc = int4_quantization_config(prefix)
    written = {"quantization_config": qc}  # read back as the loader will: it must say what we do
    int4_scheme_from_config(written, written, "kdtree quantize").check_modules(cfg, prefix)
    int4 = {module + ".weight" for module, routed in linear_modules(cfg, prefix) if routed}
    if not int4:
        raise KdtreeError(f"{src}/config.json: no MoE layer (first_k_dense_replace >= num_hidden_layers), "
                          "so no routed expert to quantize")
    missing = sorted(int4 - set(ckpt.weight_map))
    if missing:
        raise KdtreeError(f"checkpoint {src}: routed expert tensor {missing[0]!r} is missing "
                          f"({len(missing)} missing in all)")

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent))
    try:
        summary = _write(ckpt, src, tmp, int4, shard_bytes, progress)
        config = dict(cfg.raw, quantization_config=qc)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        for f in sorted(src.iterdir()):
            if f.is_file() and f.name not in REWRITTEN and not f.name.endswith(".safetensors"):
                shutil.copy2(f, tmp / f.name)
        _default_permissions(tmp)
        _move_into_place(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary.destination = dst
    return summary


def _check_destination(src: Path, dst: Path, force: bool) -> None:
    s, d = src.resolve(), dst.resolve()
    if d == s or s in d.parents or d in s.parents:
        raise KdtreeError(f"destination {dst} overlaps the source {src}: choose another folder")
    if dst.exists() or dst.is_symlink():
        if not dst.is_dir() or dst.is_symlink():
            raise KdtreeError(f"destination {dst} exists and is not a folder")
        if not force:
            raise KdtreeError(f"destination {dst} exists; pass --force to replace it")


def _default_permissions(folder: Path) -> None:
    """mkdtemp makes a private folder (and safetensors private files): give the result the
    modes any new folder and file get here (the umask's)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~umask)


def _move_into_place(tmp: Path, dst: Path) -> None:
    """Rename the finished folder to dst; an old dst (--force) is renamed aside first and
    deleted only once the new one is in place."""
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        dst.rename(old)
    try:
        tmp.rename(dst)
    except OSError:
        if old is not None:
            old.rename(dst)
        raise
    if old is not None:
        shutil.rmtree(old)


def _write(ckpt: Checkpoint, src: Path, out: Path, int4: set[str], shard_bytes: int,
           progress: Progress | None) -> QuantizeSummary:
    from safetensors.torch import save_file

    # source file by file (each is opened once), names sorted within a file
    order = sorted(ckpt.weight_map, key=lambda n: (ckpt.weight_map[n], n))
    total = sum((src / f).stat().st_size for f in set(ckpt.weight_map.values()))
    summary = QuantizeSummary(out, 0, 0, 0, 0, 0)
    shard: dict[str, torch.Tensor] = {}
    shard_size = 0
    weight_map: dict[str, str] = {}
    parts: list[str] = []

    def flush() -> None:
        nonlocal shard, shard_size
        name = f"part-{len(parts) + 1:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        parts.append(name)
        shard, shard_size = {}, 0

    for name in order:
        if name in int4:
            w = ckpt.get(name)
            if not torch.isfinite(w).all():
                raise KdtreeError(f"checkpoint file {ckpt.file_of(name)}: tensor {name!r} holds NaN or Inf")
            tensors = Int4Linear.from_weight(w).tensors(name[: -len(".weight")])
            summary.quantized += 1
        else:
            w = ckpt.read(name)
            tensors = {name: w}
            summary.copied += 1
        summary.bytes_in += w.numel() * w.element_size()
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if shard and shard_size + size > shard_bytes:
            flush()
        shard.update({k: v.contiguous() for k, v in tensors.items()})
        shard_size += size
        summary.bytes_out += size
        if progress is not None:
            progress(min(summary.bytes_in, total), total)
    if shard or not parts:
        flush()

    # final names, now that the count is known (as transformers names shards)
    n = len(parts)
    final = {p: f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i, p in enumerate(parts)}
    for p, f in final.items():
        (out / p).rename(out / f)
    index = {"metadata": {"total_size": summary.bytes_out},
             "weight_map": {k: final[v] for k, v in sorted(weight_map.items())}}
    (out / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    summary.shards = n
    return summary
