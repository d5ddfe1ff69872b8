"""The oracle the served text is checked against: `kdtree run --ar`'s decode function on
the same prompt ids, its tokens turned into text the way the server's contract says (the
model's stop id ends the text and is not part of it)."""

from __future__ import annotations

from python_engine.decode.ar import ar_generate
from python_engine.serve.server import Serving


def ar_reference(serving: Serving, prompt_ids: list[int], max_tokens: int) -> tuple[str, list[int]]:
    """(text, tokens) of greedy AR decoding, as `kdtree run --ar` produces them."""
    target = serving.loop.backend.target if serving.loop.backend.engine == "torch" else None
    assert target is not None, "the reference runs on the torch engine's target"
    stop_ids = serving.state.stop_ids
    gen = ar_generate(target, prompt_ids, max_tokens, temperature=0.0, stop_ids=stop_ids)
    tokens = list(gen.tokens)
    shown = tokens[:-1] if tokens and tokens[-1] in stop_ids else tokens
    return serving.state.tokenizer.decode(shown), tokens
