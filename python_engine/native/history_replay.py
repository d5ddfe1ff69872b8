"""The decode loop against its own primitives: a request decoded alone with every round's tree
recorded, then the same rounds again through `prefill`, `forward` (the tree, padded to the
round's rows as the decode loop pads it) and `keep`, with the greedy walk done here.

If every round's walk takes the engine's accepted path, the decode loop computed exactly what
its primitives compute from the same history. In bf16 that history differs from AR's (its cache
rows come from tree verifies of other shapes than AR's one-token decodes), which is where bf16
DDTree may part from AR without anything being wrong (the torch reference's own bf16 DDTree
parts from its own AR on some prompts of the demo pair; in float32 on none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from python_engine.ddtree.tree import Tree
from python_engine.ddtree.visibility import visibility_packed
from python_engine.native.engine import NativeEngine, RoundRecord


def tree_of(sample: dict) -> Tree:
    """A Tree from a StepReport's sampled tree (parents and tokens; depths recomputed)."""
    parent = np.asarray(sample["parent"], dtype=np.int32)
    n = parent.size - 1
    depth = np.zeros(n + 1, dtype=np.int32)
    for i in range(1, n + 1):
        depth[i] = depth[parent[i]] + 1
    return Tree(n, np.asarray(sample["token"], dtype=np.int64), depth, parent, np.zeros(n + 1, np.float32),
                [()] * (n + 1))


def verify_rows(tree: Tree, start: int, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One request's verify inputs as the decode loop builds them: the tree's rows, then padding
    up to `rows` (the root's token at the root's position, seeing the root only; see
    verify_inputs_kernel). (tokens, positions, packed visibility)."""
    if tree.n + 1 > rows:
        raise ValueError(f"a tree of {tree.n} nodes does not fit {rows} rows")
    words = (rows + 31) // 32
    tokens = np.full(rows, tree.tokens[0], dtype=np.int64)
    positions = np.full(rows, start, dtype=np.int64)
    vis = np.zeros((rows, words), dtype=np.uint32)
    vis[:, 0] = 1
    tokens[:tree.n + 1] = tree.tokens
    positions[:tree.n + 1] = tree.positions(start)
    vis[:tree.n + 1] = visibility_packed(tree, words)
    return tokens, positions, vis


@dataclass
class AloneRun:
    tokens: list[int]
    rounds: list[tuple[RoundRecord, dict | None]] = field(default_factory=list)  # (record, sampled tree)


def decode_alone(eng: NativeEngine, prompt: list[int], max_new: int, budget: int) -> AloneRun:
    """Decode one request by itself (the engine must be idle), keeping every round's tree."""
    rid = eng.submit(prompt, max_new, budget=budget)
    run = AloneRun([])
    while True:
        r = eng.step(want_tree=True)
        for rec in r.records:
            run.rounds.append((rec, r.tree if r.tree and r.tree["request"] == rec.request else None))
        if r.rounds == 0 and r.waiting == 0 and r.running == 0:
            break
    run.tokens = eng.request(rid).tokens
    eng.release(rid)
    return run


@dataclass
class Replay:
    rounds: int                 # rounds replayed
    parted: int | None = None   # the first round whose walk left the engine's path
    missing_tree: bool = False  # a round came without its tree (nothing to replay from there)
    replay_path: list[int] | None = None
    engine_path: list[int] | None = None
    gap: float | None = None    # at the parting node: the replay's pick minus the engine's token, in logits

    @property
    def same(self) -> bool:
        return self.parted is None and not self.missing_tree


def replay_history(eng: NativeEngine, prompt: list[int], run: AloneRun, rows: int, slot: int = 0) -> Replay:
    """`run`'s rounds again through the primitives on `slot` (reset before and after)."""
    eng.slot_reset(slot)
    try:
        eng.prefill(slot, prompt)
        start = len(prompt)
        for k, (_, sample) in enumerate(run.rounds):
            if sample is None:
                return Replay(k, missing_tree=True)
            tree = tree_of(sample)
            toks, pos, vis = verify_rows(tree, start, rows)
            logits, _ = eng.forward(slot, toks[None], pos[None], vis[None], commit=False)
            kids = tree.children()
            path = [0]
            while True:
                pick = int(logits[0, path[-1]].argmax())
                nxt = kids[path[-1]].get(pick)
                if nxt is None:
                    break
                path.append(nxt)
            theirs = [int(a) for a in sample["accepted"]]
            if path != theirs:
                j = next((i for i, (x, y) in enumerate(zip(path, theirs)) if x != y), min(len(path), len(theirs)))
                row = logits[0, path[j - 1]]
                gap = None
                if j < len(theirs):
                    gap = float(row.max() - row[int(tree.tokens[theirs[j]])])
                return Replay(k, parted=k, replay_path=path, engine_path=theirs, gap=gap)
            eng.keep(slot, path)
            start += len(path)
        return Replay(len(run.rounds))
    finally:
        eng.slot_reset(slot)
