"""DDTree decoding (docs/ddtree.md) of one request.

Prefill the prompt (its target features become the drafter's context; its last logits
give the first token, the first round's root). Then per round:
  draft      the drafter returns logits [D, V] for the D = block_size - 1 positions after
             the root;
  tree_build per-depth top-K and the best-first tree of at most `budget` nodes
             (python_engine.ddtree, the one definition shared with the native engine);
  verify     one target forward over root + n nodes at positions start + depth, each seeing
             the whole cache plus its ancestors and itself;
  commit     the choice rule gives the target's token at every node, the accept walk
             follows it; the cache keeps the accepted rows (compacted after the prefix) and
             the accepted nodes' target features become the drafter's new context.
The emitted tokens are the accepted nodes' tokens then the bonus; the bonus is the next
round's root and is not in the cache yet.

`ddtree_steps` is the loop as a generator that yields after the first token and after
every round (the server steps many requests through it, one round each in turn);
`ddtree_generate` runs it to the end.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Callable

import numpy as np
import torch

from python_engine.ddtree import accept_walk, build_tree, compaction_indices, topk_logprobs, visibility_dense
from python_engine.decode.budget_auto import AutoBudget
from python_engine.decode.choice import ChoiceRule, standard_choice
from python_engine.decode.result import Generation, RoundInfo, finish_tokens, run_to_end
from python_engine.decode.timer import StageClock, us
from python_engine.errors import KdtreeError
from python_engine.model.drafter_base import Drafter
from python_engine.model.target import TargetModel


def ddtree_generate(*args, **kwargs) -> Generation:
    """`ddtree_steps` (the same arguments) run to the end."""
    return run_to_end(ddtree_steps(*args, **kwargs))


@torch.no_grad()
def ddtree_steps(
    target: TargetModel,
    drafter: Drafter,
    prompt: list[int],
    max_new_tokens: int,
    budget: int | AutoBudget,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    block_size: int | None = None,
    stop_ids=(),
    choice_rule: ChoiceRule = standard_choice,
    on_round: Callable[[RoundInfo], None] | None = None,
    trace: bool = False,
) -> Generator[Generation, None, Generation]:
    generator = generator or torch.Generator().manual_seed(0)
    block_size = block_size or drafter.block_size
    if block_size < 1:
        raise KdtreeError(f"block size must be >= 1, got {block_size}")
    # --budget auto: the best tree of max_budget nodes is built, then cut to the size the
    # policy picks for this round (the first n nodes are the best tree of n: only the
    # tree's size changes, never its order)
    auto = budget if isinstance(budget, AutoBudget) else None
    budget = auto.max_budget if auto else budget
    if budget < 0:
        raise KdtreeError(f"node budget must be >= 0, got {budget}")
    V = target.cfg.vocab_size
    layer_ids = tuple(drafter.target_layer_ids)
    clock = StageClock(target.device)
    gen = Generation(prompt=list(prompt), trace=[] if trace else None)
    if max_new_tokens <= 0:
        return gen
    P = len(prompt)
    cache = target.new_cache(capacity=P + max_new_tokens + budget + 2)
    state = drafter.new_state()

    t0 = clock.now()
    out = target.forward(prompt, torch.arange(P), cache, hidden_layers=layer_ids)
    bonus = int(choice_rule(out.logits[-1:], temperature, generator, None)[0])
    ctx_tokens = torch.as_tensor(prompt, dtype=torch.long)
    ctx_features = out.features(layer_ids) if layer_ids else None
    done = finish_tokens(gen.tokens, [bonus], max_new_tokens, stop_ids)[1]
    t1 = clock.now()
    gen.prefill_s = t1 - t0
    yield gen
    start = P  # the root's position; the cache holds rows [0, start)

    while not done:
        a = clock.now()
        draft_logits = drafter.draft(state, ctx_tokens, ctx_features, bonus, start, block_size)
        b = clock.now()
        logits_np = draft_logits.float().cpu().numpy()
        logp, tok = topk_logprobs(logits_np, min(budget, V))
        tree = build_tree(logp, tok, budget, root_token=bonus)
        if auto:
            tree = tree.prefix(auto.choose(tree.score, context=start))
        c = clock.now()

        past = cache.length
        visibility = torch.ones(tree.n + 1, past + tree.n + 1, dtype=torch.bool)
        visibility[:, past:] = torch.from_numpy(visibility_dense(tree))
        out = target.forward(tree.tokens, tree.positions(start), cache, visibility, hidden_layers=layer_ids)
        d = clock.now()

        choice = choice_rule(out.logits, temperature, generator, tree)
        accepted, bonus = accept_walk(tree, choice)
        src, dst = compaction_indices(past, accepted)
        cache.compact(src, dst)
        acc = torch.as_tensor(accepted, dtype=torch.long)
        ctx_tokens = torch.as_tensor(tree.tokens[accepted], dtype=torch.long)
        ctx_features = out.features(layer_ids)[acc.to(target.device)] if layer_ids else None
        start += len(accepted)
        new_tokens = [int(t) for t in tree.tokens[accepted[1:]]] + [bonus]
        done = finish_tokens(gen.tokens, new_tokens, max_new_tokens, stop_ids)[1]
        e = clock.now()

        info = RoundInfo(len(gen.rounds), len(accepted), tree.n, tree.max_depth,
                         {"draft": us(b - a), "tree_build": us(c - b), "verify": us(d - c), "commit": us(e - d)},
                         len(gen.tokens), budget=tree.n if auto else budget)
        if auto:
            auto.observe(info.accept_len, info.times_us)
        gen.rounds.append(info)
        if trace:
            gen.trace.append({
                "start": start - len(accepted), "draft_logits": logits_np, "logp": logp, "tok": tok,
                "tree_tokens": tree.tokens.copy(), "tree_depth": tree.depth.copy(),
                "tree_parent": tree.parent.copy(), "visibility": visibility.numpy().copy(),
                "verify_logits": out.logits.float().cpu().numpy(), "choice": np.asarray(choice, dtype=np.int64),
                "accepted": np.asarray(accepted, dtype=np.int64), "bonus": bonus, "src": src, "dst": dst,
                "cache_length": cache.length,
                "cache_rows": cache.rows[:, : cache.length].float().cpu().numpy().copy(),
                "features": None if ctx_features is None else ctx_features.float().cpu().numpy(),
            })
        if on_round:
            on_round(info)
        if not done:
            yield gen
    gen.decode_s = clock.now() - t1
    return gen
