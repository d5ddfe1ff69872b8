"""Turning the user's prompts into token ids (and tokens back into text) for `kdtree run`
and `kdtree demo`: --prompt-ids lists, taken as they are, or text, through the one rule
in TextCodec.encode."""

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
    """The model directory's tokenizer.json, if any, and the rule for text prompts."""

    def __init__(self, model_dir: str | Path):
        self.model_dir = Path(model_dir)
        path = self.model_dir / "tokenizer.json"
        self.tokenizer = None
        if path.exists():
            from tokenizers import Tokenizer

            try:
                self.tokenizer = Tokenizer.from_file(str(path))
            except Exception as exc:
                raise KdtreeError(f"{path}: cannot load the tokenizer: {exc}") from None
        self.path = path

    def encode(self, text: str) -> list[int]:
        """A text prompt's ids, the same for `kdtree run --prompt` and `kdtree demo --prompt`:
        the model's BOS (config.json `bos_token_id`), then tokenizer.json's ids for the
        text. No BOS when config.json has none or tokenizer_config.json says
        `"add_bos_token": false`, and never a second one when the tokenizer's own template
        already put it first. (DeepSeek-V3 starts every sequence with its BOS; the demo
        pair was trained with one before every file.)"""
        if self.tokenizer is None:
            raise KdtreeError(f"--prompt needs {self.path} (not found); pass token ids with --prompt-ids")
        ids = self.tokenizer.encode(text).ids
        if not ids:
            raise KdtreeError(f"--prompt {text!r} encodes to no tokens")
        bos = self.bos_id()
        return ids if bos is None or ids[0] == bos else [bos, *ids]

    def bos_id(self) -> int | None:
        """The BOS a text prompt starts with, or None."""
        from python_engine.model.config import load_target_config, read_json

        settings = self.model_dir / "tokenizer_config.json"
        if settings.exists():
            add = read_json(settings, "tokenizer config").get("add_bos_token", True)
            if not isinstance(add, bool):
                raise KdtreeError(f"{settings}: add_bos_token must be true or false, got {add!r}")
            if not add:
                return None
        return load_target_config(self.model_dir).bos_token_id

    def decode(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)
