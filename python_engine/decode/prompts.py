"""Turning the user's prompts into token ids (and tokens back into text) for `kdtree run`:
--prompt-ids lists, or text through the model directory's tokenizer.json."""

from __future__ import annotations

from pathlib import Path

from python_engine.errors import KdtreeError


def parse_ids(text: str, vocab_size: int) -> list[int]:
    """'1,2, 3' -> [1, 2, 3], each in 0..vocab_size-1."""
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part != ""]
    except ValueError:
        raise KdtreeError(f"--prompt-ids {text!r}: expected comma-separated integers, e.g. 1,2,3") from None
    if not ids:
        raise KdtreeError("--prompt-ids: empty prompt")
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise KdtreeError(f"--prompt-ids: token ids {bad[:5]} are outside the vocab 0..{vocab_size - 1}")
    return ids


class TextCodec:
    """The model directory's tokenizer.json, if any."""

    def __init__(self, model_dir: str | Path):
        path = Path(model_dir) / "tokenizer.json"
        self.tokenizer = None
        if path.exists():
            from tokenizers import Tokenizer

            try:
                self.tokenizer = Tokenizer.from_file(str(path))
            except Exception as exc:
                raise KdtreeError(f"{path}: cannot load the tokenizer: {exc}") from None
        self.path = path

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise KdtreeError(f"--prompt needs {self.path} (not found); pass token ids with --prompt-ids")
        ids = self.tokenizer.encode(text).ids
        if not ids:
            raise KdtreeError(f"--prompt {text!r} encodes to no tokens")
        return ids

    def decode(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)
