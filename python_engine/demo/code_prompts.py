"""Prompts the demo pair (trained on Python source) knows how to continue, for tests and
benchmarks: short runs of lines of Python, tokenized with the demo tokenizer, chosen by a
seed. The lines are a fixed file (code_lines.txt: this repository's python_engine/ sources
at commit 5295f47, lines over 20 characters), not the live sources, so that a seed logged by
a failing test or a GPU run picks the same prompts after the code changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from python_engine.demo.defaults import DEFAULT_TARGET

LINES_FILE = Path(__file__).with_name("code_lines.txt")


def code_prompts(count: int, seed: int, max_lines: int = 3) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(DEFAULT_TARGET / "tokenizer.json"))
    return [tok.encode(text).ids for text in code_texts(count, seed, max_lines)]


def code_texts(count: int, seed: int | np.random.Generator, max_lines: int = 3) -> list[str]:
    """The prompts of code_prompts as text (what a client of `kdtree serve` sends)."""
    lines = LINES_FILE.read_text().split("\n")[:-1]  # one line each, as written (no splitlines surprises)
    rng = np.random.default_rng(seed)
    starts = rng.choice(len(lines) - max_lines, size=count, replace=False)
    return ["\n".join(lines[s:s + int(rng.integers(1, max_lines + 1))]) + "\n" for s in starts]
