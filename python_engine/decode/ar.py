"""Autoregressive decoding of the target: prefill, then one token per forward.

`ar_steps` is the loop as a generator that yields after the first token and after every
round (the server steps many requests through it, one round each in turn); `ar_generate`
runs it to the end."""

from __future__ import annotations

from collections.abc import Generator
from typing import Callable

import torch

from python_engine.decode.choice import ChoiceRule, standard_choice
from python_engine.decode.result import Generation, RoundInfo, finish_tokens, run_to_end
from python_engine.decode.timer import StageClock, us
from python_engine.model.target import TargetModel


def ar_generate(*args, **kwargs) -> Generation:
    """`ar_steps` (the same arguments) run to the end."""
    return run_to_end(ar_steps(*args, **kwargs))


@torch.no_grad()
def ar_steps(
    target: TargetModel,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stop_ids=(),
    choice_rule: ChoiceRule = standard_choice,
    on_round: Callable[[RoundInfo], None] | None = None,
) -> Generator[Generation, None, Generation]:
    generator = generator or torch.Generator().manual_seed(0)
    clock = StageClock(target.device)
    gen = Generation(prompt=list(prompt))
    if max_new_tokens <= 0:
        return gen
    P = len(prompt)
    cache = target.new_cache(capacity=P + max_new_tokens + 1)
    t0 = clock.now()
    out = target.forward(prompt, torch.arange(P), cache)
    token = int(choice_rule(out.logits[-1:], temperature, generator, None)[0])
    done = finish_tokens(gen.tokens, [token], max_new_tokens, stop_ids)[1]
    t1 = clock.now()
    gen.prefill_s = t1 - t0
    yield gen
    pos = P
    while not done:
        a = clock.now()
        out = target.forward([token], [pos], cache)
        b = clock.now()
        token = int(choice_rule(out.logits, temperature, generator, None)[0])
        pos += 1
        done = finish_tokens(gen.tokens, [token], max_new_tokens, stop_ids)[1]
        c = clock.now()
        info = RoundInfo(len(gen.rounds), 1, 0, 0,
                         {"draft": 0.0, "tree_build": 0.0, "verify": us(b - a), "commit": us(c - b)},
                         len(gen.tokens))
        gen.rounds.append(info)
        if on_round:
            on_round(info)
        if not done:
            yield gen
    gen.decode_s = clock.now() - t1
    return gen
