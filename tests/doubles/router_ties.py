"""Router near-ties: where two bf16 forwards may legitimately pick different tokens.

The DeepSeek-V3 router picks `topk_group` groups and then `num_experts_per_tok` experts by
score. Where the last chosen and the first left-out group (or expert) are nearly equal, the
rounding of a bf16 forward decides which side a token takes, and two correct forwards that
round differently (a decode step of one token, a tree verify of 33, a prefill) can route it
differently: an O(1) change of that token's layer output that reaches later tokens through
attention, and may change a greedy choice downstream.

`explain_divergence` tests that story on one divergence with the torch reference: it lists
every routing boundary of the sequence (layer, position, group or expert) with its margin,
replays the other side of each boundary within `max_margin`, one at a time, and says which
replay makes the reference pick the other of the two tokens. A divergence no such replay
explains is not a router near-tie.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from python_engine.model.target import TargetModel

# Boundaries whose margin (in score units: sigmoid scores in (0, 1) plus the correction bias)
# is at most this are replayed. bf16 keeps 8 significant bits, ~2e-3 at a score near 0.5, and
# the router input of a later layer carries the roundings of every layer before it: on the
# INT4 demo pair the torch reference's bf16 and float32 scores differ by up to 4.5e-3 in its
# first MoE layer and 9e-3 in its third. The H200's bf16 divergences needed 3.5e-4 to 3.5e-3
# (tests/native/test_router_ties.py).
DEFAULT_MAX_MARGIN = 1e-2
# Replays at most this many boundaries (each is one forward).
DEFAULT_MAX_REPLAYS = 96


@dataclass(frozen=True)
class Boundary:
    layer: int
    position: int
    kind: str  # "group" or "expert"
    margin: float  # chosen minus left out, in score units (>= 0)
    chosen: tuple[int, ...]  # the router's experts at this position
    other: tuple[int, ...]  # the experts on the boundary's other side

    def __str__(self) -> str:
        return (f"layer {self.layer} position {self.position} {self.kind} boundary, margin {self.margin:.3g}: "
                f"experts {list(self.chosen)} -> {list(self.other)}")


def _choice_scores(target: TargetModel, layer: int, h: torch.Tensor) -> torch.Tensor:
    moe = target.w.layers[layer].moe
    return torch.nn.functional.linear(h.to(moe.router.dtype), moe.router).sigmoid() + moe.correction_bias


def _top(values: torch.Tensor, allowed: list[int], k: int) -> list[int]:
    order = sorted(allowed, key=lambda e: -float(values[e]))
    return order[:k]


def routing_boundaries(target: TargetModel, seq: list[int]) -> list[Boundary]:
    """Every group and expert boundary of `seq`'s reference forward whose other side routes
    the position differently, smallest margin first."""
    taps: dict = {}
    target.forward(seq, torch.arange(len(seq)), target.new_cache(len(seq) + 1), taps=taps)
    return _boundaries(target, taps)


def _boundaries(target: TargetModel, taps: dict) -> list[Boundary]:
    cfg = target.cfg
    E, G, tg, k = cfg.n_routed_experts, cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok
    per_group = E // G
    out = []
    for layer, lw in enumerate(target.w.layers):
        if lw.moe is None:
            continue
        c = _choice_scores(target, layer, taps[f"{layer}.ffn_in"]).float().cpu()
        for pos in range(c.shape[0]):
            row = c[pos]
            groups = row.view(G, per_group)
            gscore = groups.topk(min(2, per_group), dim=-1)[0].sum(dim=-1)
            gorder = sorted(range(G), key=lambda g: -float(gscore[g]))
            chosen_groups = gorder[:tg]
            members = lambda gs: [g * per_group + i for g in gs for i in range(per_group)]
            chosen = _top(row, members(chosen_groups), k)
            other = sorted(_top(row, members(chosen_groups[:-1] + [gorder[tg]]), k)) if G > tg else sorted(chosen)
            if other != sorted(chosen):  # (the swapped group may hold none of the chosen experts)
                out.append(Boundary(layer, pos, "group", float(gscore[gorder[tg - 1]] - gscore[gorder[tg]]),
                                    tuple(sorted(chosen)), tuple(other)))
            pool = sorted(members(chosen_groups), key=lambda e: -float(row[e]))
            if len(pool) > k:
                out.append(Boundary(layer, pos, "expert", float(row[pool[k - 1]] - row[pool[k]]),
                                    tuple(sorted(chosen)), tuple(sorted(pool[:k - 1] + [pool[k]]))))
    return sorted(out, key=lambda b: b.margin)


def reference_pick(target: TargetModel, seq: list[int], override=None, taps: dict | None = None) -> int:
    """The greedy token after `seq` (with `override` as TargetModel.forward's route_override)."""
    out = target.forward(seq, torch.arange(len(seq)), target.new_cache(len(seq) + 1), taps=taps,
                         route_override=override)
    return int(out.logits[-1].argmax())


@dataclass
class Explanation:
    reference_pick: int  # the float32 reference's token after seq
    boundary: Boundary | None  # the replay that picks the other token, if one does
    replayed: int  # boundaries replayed
    smallest_margin: float

    @property
    def explained(self) -> bool:
        return self.boundary is not None


def explain_divergence(target: TargetModel, seq: list[int], a: int, b: int, max_margin: float = DEFAULT_MAX_MARGIN,
                       max_replays: int = DEFAULT_MAX_REPLAYS) -> Explanation:
    """After `seq` two forwards picked `a` and `b`. If the reference picks one of them and
    replaying the other side of one routing boundary within `max_margin` picks the other,
    that boundary explains the divergence (`Explanation.boundary`); else it is None."""
    if target.cfg.n_routed_experts == 0:
        raise ValueError("explain_divergence: the target has no routed experts")
    taps: dict = {}
    pick = reference_pick(target, seq, taps=taps)  # one forward gives the pick and the boundaries
    bounds = _boundaries(target, taps)
    smallest = bounds[0].margin if bounds else float("inf")
    if pick not in (a, b):
        return Explanation(pick, None, 0, smallest)
    wanted = b if pick == a else a
    # the last token's own boundaries first (they decide its logits directly; every H200 case
    # so far was one), then the earlier positions' (through attention), smallest margin first
    last = len(seq) - 1
    near = sorted((x for x in bounds if x.margin <= max_margin), key=lambda x: (x.position != last, x.margin))
    near = near[:max_replays]
    for i, bd in enumerate(near):
        if reference_pick(target, seq, {bd.layer: {bd.position: list(bd.other)}}) == wanted:
            return Explanation(pick, bd, i + 1, smallest)
    return Explanation(pick, None, len(near), smallest)
