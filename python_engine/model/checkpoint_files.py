"""The files of a Hugging Face checkpoint directory (no torch: the native engine's binding
uses this too): one model.safetensors, or shards listed by model.safetensors.index.json."""

from __future__ import annotations

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
