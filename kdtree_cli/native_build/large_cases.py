"""`kdtree test --native --large`: fresh large inputs for the native tests, from one logged
seed, written to a scratch folder (never committed): the long-prefix attention cases of
python_engine/refgen/large_attn_cases.py (float64 references computed on the GPU) and a
tie-heavy tree fuzz bundle (python_engine/refgen/tree_fuzz_cases.py, with logits cases for
topk_logprobs). Returns the environment variables the test programs read."""

from __future__ import annotations

import contextlib
import io
import secrets
from pathlib import Path

TREE_FUZZ_CASES = 400


def fresh_seed() -> int:
    return secrets.randbits(31)


def write_large_cases(folder: Path, seed: int) -> dict[str, str]:
    from python_engine.refgen.large_attn_cases import write_large_cases as write_attention
    from python_engine.refgen.tree_fuzz_cases import write_fuzz_bundle

    attention = folder / "attention"
    with contextlib.redirect_stderr(io.StringIO()):  # one line per file; the caller reports the total
        write_attention(attention, seed)
    fuzz = write_fuzz_bundle(folder / "tree_fuzz.kdtr", TREE_FUZZ_CASES, seed)
    return {"KDTREE_LARGE_ATTN_DIR": str(attention), "KDTREE_TREE_FUZZ": str(fuzz)}
