"""What a decode loop returns for one request, and its per-round record."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass, field


def tau(accept_lens: Iterable[int]) -> float:
    """Mean accepted tokens per target forward: the mean acceptance length over rounds
    (each counts the root, so AR's tau is 1.0; docs/events.md). 0.0 with no rounds."""
    values = list(accept_lens)
    return tau_of(sum(values), len(values))


def tau_of(accepted: float, rounds: int, empty: float = 0.0) -> float:
    """tau from running sums: accepted path lengths (root included) over rounds; `empty`
    with no rounds (the monitor shows NaN as "-")."""
    return float(accepted / rounds) if rounds else empty


@dataclass
class RoundInfo:
    index: int
    accept_len: int  # accepted path length including the root (>= 1)
    tree_size: int  # n, nodes besides the root
    tree_depth: int  # deepest node of the tree
    times_us: dict[str, float]  # draft, tree_build, verify, commit
    tokens: int  # tokens generated so far for the request
    budget: int = 0  # the round's node budget (--budget auto: chosen per round)


@dataclass
class Generation:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)  # generated tokens (prompt excluded)
    rounds: list[RoundInfo] = field(default_factory=list)
    prefill_s: float = 0.0  # prefill + first token (time to first token)
    decode_s: float = 0.0  # everything after the first token
    trace: list[dict] | None = None  # per-round arrays when tracing (reference bundles)

    @property
    def tau(self) -> float:
        return tau(r.accept_len for r in self.rounds)

    @property
    def decode_tokens(self) -> int:
        return max(0, len(self.tokens) - 1)


def finish_tokens(tokens: list[int], new: list[int], max_new: int, stop_ids) -> tuple[list[int], bool]:
    """Append `new` to `tokens`, cut at the first stop token (kept) or at max_new.
    Returns (tokens, done)."""
    for t in new:
        if len(tokens) >= max_new:
            return tokens, True
        tokens.append(int(t))
        if int(t) in stop_ids:
            return tokens, True
    return tokens, len(tokens) >= max_new


def finish_reason(tokens: list[int], stop_ids) -> str:
    """Why a request that ran to its end stopped, as OpenAI and vLLM name it: "stop" when its
    last token is a stop id, else "length" (its max_new_tokens, or its slot's capacity)."""
    return "stop" if tokens and int(tokens[-1]) in stop_ids else "length"


def run_to_end(steps: Generator[object, None, Generation]) -> Generation:
    """Drive a decode loop written as steps (ar_steps, ddtree_steps: one `yield` after the
    first token and after every round) to its end; its Generation."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
