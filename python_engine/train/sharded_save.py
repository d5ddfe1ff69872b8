"""Writing a state dict as Hugging Face safetensors: one model.safetensors, or shards of at
most `max_file_bytes` tensor bytes each plus model.safetensors.index.json (the repository
ships no file over 8 MiB)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def save_sharded(tensors: dict[str, torch.Tensor], out_dir: Path, max_file_bytes: int) -> list[Path]:
    """Write `tensors` (in their dtypes, in dict order) under out_dir, replacing any
    safetensors files there; returns the files written."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.safetensors*"):
        old.unlink()
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if total <= max_file_bytes:
        path = out_dir / "model.safetensors"
        save_file(tensors, str(path), metadata={"format": "pt"})
        return [path]
    shards, current, size = [], {}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > max_file_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = t
        size += nbytes
    shards.append(current)
    paths, weight_map = [], {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in shard})
        paths.append(out_dir / fname)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths
