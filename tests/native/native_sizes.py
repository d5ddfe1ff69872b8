"""Problem sizes of the native tests: small on the CPU emulator (CI), the issue's on a GPU."""

from __future__ import annotations

import os

GPU = os.environ.get("KDTREE_NATIVE_VARIANT", "emu") == "gpu"

PREFILL_TOKENS = 210            # >= 200, prefilled in several chunks
TREE_NODES = 64                 # the verify pass's tree
DDTREE_PROMPTS = 32 if GPU else 3
DDTREE_TOKENS = 128 if GPU else 24
CONCURRENT = 32 if GPU else 4   # requests decoded together vs alone
SAMPLES = 2000 if GPU else 600  # T > 0 draws for the chi-square test
SOAK_TOKENS = 100_000 if GPU else 200   # generated tokens over many requests (the soak)
BF16_PROMPTS = 32 if GPU else 2
