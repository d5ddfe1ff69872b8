"""Reading tensors from a Hugging Face checkpoint directory: one `model.safetensors`, or
shards listed by `model.safetensors.index.json`. Every failure (missing shard, bad header,
missing tensor, wrong shape) is a KdtreeError naming the file and the tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch

from python_engine.errors import KdtreeError
from python_engine.model.checkpoint_files import INDEX_NAME, SINGLE_NAME
from python_engine.model.config import read_json


class Checkpoint:
    """Tensor name -> file map of a checkpoint directory, with lazily opened files."""

    def __init__(self, directory: str | Path, prefix: str = ""):
        self.directory = Path(directory)
        self.prefix = prefix  # prepended to every requested name (Kimi: "language_model.")
        self._handles: dict[str, object] = {}
        index = self.directory / INDEX_NAME
        single = self.directory / SINGLE_NAME
        if index.exists():
            obj = read_json(index, "checkpoint index")
            weight_map = obj.get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise KdtreeError(f"checkpoint index {index}: missing or malformed 'weight_map'")
            self.weight_map: dict[str, str] = dict(weight_map)
        elif single.exists():
            self.weight_map = {name: SINGLE_NAME for name in self._open(SINGLE_NAME).keys()}
        else:
            found = sorted(p.name for p in self.directory.glob("*.safetensors"))
            if len(found) != 1:
                raise KdtreeError(
                    f"{self.directory}: no {SINGLE_NAME} or {INDEX_NAME}"
                    + (f" (found {len(found)} .safetensors files and no index)" if found else "")
                )
            self.weight_map = {name: found[0] for name in self._open(found[0]).keys()}

    def _open(self, filename: str):
        handle = self._handles.get(filename)
        if handle is not None:
            return handle
        from safetensors import safe_open

        path = self.directory / filename
        if not path.exists():
            raise KdtreeError(f"checkpoint file {path} is missing (listed in {INDEX_NAME})")
        try:
            handle = safe_open(str(path), framework="pt", device="cpu")
        except Exception as exc:  # safetensors raises its own error type for bad headers
            raise KdtreeError(f"checkpoint file {path} is not a readable safetensors file: {exc}") from None
        self._handles[filename] = handle
        return handle

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self.weight_map

    def names(self) -> list[str]:
        """Names under the prefix, with the prefix removed."""
        p = self.prefix
        return [n[len(p):] for n in self.weight_map if n.startswith(p)]

    def file_of(self, name: str) -> Path:
        return self.directory / self.weight_map[self.prefix + name]

    def read(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Load one tensor as stored (on CPU, any dtype), checking its shape when given."""
        full = self.prefix + name
        filename = self.weight_map.get(full)
        if filename is None:
            raise KdtreeError(f"checkpoint {self.directory}: tensor {full!r} is missing")
        handle = self._open(filename)
        try:
            tensor = handle.get_tensor(full)
        except Exception as exc:
            raise KdtreeError(
                f"checkpoint file {self.directory / filename}: cannot read tensor {full!r}: {exc}"
            ) from None
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise KdtreeError(
                f"checkpoint file {self.directory / filename}: tensor {full!r} has shape "
                f"{list(tensor.shape)}, expected {list(shape)}"
            )
        return tensor

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Load one float tensor (on CPU, stored dtype), checking its shape when given."""
        tensor = self.read(name, shape)
        where = f"checkpoint file {self.file_of(name)}: tensor {self.prefix + name!r}"
        if tensor.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
            raise KdtreeError(f"{where} is FP8; dequantize the checkpoint to bf16 first")
        if not tensor.is_floating_point():
            raise KdtreeError(
                f"{where} has dtype {tensor.dtype}; the engine reads float weights here (INT4 only "
                "for routed experts, declared by a compressed-tensors quantization_config)"
            )
        return tensor
