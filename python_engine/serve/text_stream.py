"""Tokens to text, as they come: incremental detokenisation that never splits a multi-byte
character (tokenizers' DecodeStream holds a token back until its bytes make whole
characters), and `stop` strings matched across token boundaries (the text that could be
the start of a stop string is held back until the next tokens decide it)."""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class TextStream:
    def __init__(self, tokenizer: Tokenizer, stop_strings: list[str] = ()):
        self._tokenizer = tokenizer
        self._decoder = DecodeStream(skip_special_tokens=True)
        self._stops = [s for s in stop_strings if s]
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending = ""  # decoded, not yet handed out (could start a stop string)
        self.stopped = False  # a stop string was found: the text ends before it

    def feed(self, token_ids: list[int]) -> str:
        """The text the tokens complete that is safe to hand out now."""
        if self.stopped:
            return ""
        for token in token_ids:
            piece = self._decoder.step(self._tokenizer, int(token))
            if piece:
                self._pending += piece
        cut = self._first_stop()
        if cut is not None:
            self.stopped = True
            out, self._pending = self._pending[:cut], ""
            return out
        keep = min(self._hold, len(self._pending))
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(out):]
        return out

    def finish(self) -> str:
        """The held-back rest, once no more tokens come."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return out

    def _first_stop(self) -> int | None:
        hits = [i for i in (self._pending.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None
