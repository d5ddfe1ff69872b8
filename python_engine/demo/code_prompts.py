"""Prompts the demo pair (trained on Python source) knows how to continue, for tests and
benchmarks: short runs of lines from this repository's own Python files, tokenized with the
demo tokenizer, chosen by a seed."""

from __future__ import annotations

import numpy as np

from python_engine.demo.defaults import DEFAULT_TARGET
from python_engine.project import PROJECT_ROOT

MIN_LINE_CHARS = 20  # skip blank and trivial lines


def code_prompts(count: int, seed: int, max_lines: int = 3) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(DEFAULT_TARGET / "tokenizer.json"))
    lines = [ln for p in sorted((PROJECT_ROOT / "python_engine").rglob("*.py")) for ln in p.read_text().splitlines()
             if len(ln.strip()) > MIN_LINE_CHARS]
    rng = np.random.default_rng(seed)
    starts = rng.choice(len(lines) - max_lines, size=count, replace=False)
    return [tok.encode("\n".join(lines[s:s + int(rng.integers(1, max_lines + 1))]) + "\n").ids for s in starts]
