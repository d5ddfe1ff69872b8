"""One request's life on the async side: submit it to the engine loop, turn the tokens
each step brings into text (text_stream.py), stop at a stop string or the model's stop
id, and cancel the engine's request whenever the consumer goes away first (a client that
disconnected, a stop string that matched)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tokenizers import Tokenizer

from python_engine.decode.result import finish_reason
from python_engine.serve.api_error import ApiError
from python_engine.serve.backend import SamplingParams
from python_engine.serve.engine_loop import CANCELLED, Draining, EngineLoop, QueueFull
from python_engine.serve.text_stream import TextStream

RETRY_AFTER_S = 1  # what a 429 asks the client to wait


@dataclass
class Delta:
    text: str
    finish_reason: str | None = None  # "stop", "length" or "abort" (the server stopped it)
    completion_tokens: int = 0
    error: str | None = None  # the engine failed the request


def sampling_params(max_new_tokens: int, temperature: float, seed: int | None, stop_ids) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                          seed=secrets.randbits(63) if seed is None else seed, stop_ids=tuple(stop_ids))


def submit(loop: EngineLoop, prompt: list[int], params: SamplingParams):
    try:
        return loop.submit(prompt, params, asyncio.get_running_loop())
    except QueueFull as exc:
        raise ApiError(429, f"the server is at capacity ({exc}): retry after {RETRY_AFTER_S} s",
                       code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    except Draining as exc:
        raise ApiError(503, f"{exc}: send the request to another server", code="draining") from None


async def generate(loop: EngineLoop, ticket, tokenizer: Tokenizer, stop_strings: list[str]) -> AsyncIterator[Delta]:
    """The text as it grows; the last Delta has the finish reason and the token count."""
    params: SamplingParams = ticket.params
    text = TextStream(tokenizer, stop_strings)
    produced = 0
    last_token = None  # the final Progress may bring no token: the stop id can come a step before it
    finished = False
    try:
        while True:
            p = await ticket.updates.get()
            if p.error is not None:
                finished = True
                if p.error == CANCELLED:
                    return
                shutdown = p.error.startswith("the server is shutting down")
                yield Delta(text.finish() if shutdown else "", "abort" if shutdown else None, produced,
                            None if shutdown else p.error)
                return
            tokens = p.new_tokens
            produced += len(tokens)
            last_token = tokens[-1] if tokens else last_token
            ended_by_stop_id = p.done and finish_reason([] if last_token is None else [last_token],
                                                        params.stop_ids) == "stop"
            piece = text.feed(tokens[:-1] if tokens and ended_by_stop_id else tokens)
            if text.stopped:
                yield Delta(piece, "stop", produced)
                return  # `finished` stays False: the engine's request is cancelled below
            if p.done:
                finished = True
                reason = "stop" if ended_by_stop_id or produced < params.max_new_tokens else "length"
                yield Delta(piece + text.finish(), reason, produced)
                return
            if piece:
                yield Delta(piece, None, produced)
    finally:
        if not finished:
            loop.cancel(ticket, "stop" if text.stopped else "abort")
