"""Bundles for the DDTree kernels: tree_build.kdtr, tree_accept.kdtr, compaction.kdtr.

Schema (ints are int32; bit j of a visibility row is bit j%32 of word j//32):
- tree_build.kdtr: num_cases (int64[1]); c{i}.logp f32[D,K], c{i}.tok [D,K], c{i}.budget [1],
  c{i}.root [1], optional c{i}.logits f32[D,V] (then logp/tok are its top-K, K=min(N,V));
  outputs c{i}.n [1], c{i}.tokens/depth/parent [n+1], c{i}.score f32[n+1],
  c{i}.vis u32[n+1, ceil((n+1)/32)].
  num_batches (int64[1]); b{j}.logp f32[B,D,K], b{j}.tok [B,D,K], b{j}.budget [B],
  b{j}.root [B]; outputs b{j}.n [B], b{j}.tokens/depth/parent [B, maxN+1] (-1 padded),
  b{j}.vis u32[B, maxN+1, words].
- tree_accept.kdtr: num_cases; a{i}.tokens/depth/parent [n+1], a{i}.choice [n+1], optional
  a{i}.logits f32[n+1, V] (choice = its argmax, lowest id on ties); outputs a{i}.accepted
  [m+1], a{i}.bonus [1].
- compaction.kdtr: num_cases; k{i}.past [1], k{i}.accepted [m+1], k{i}.cache f32[past+1+n, W];
  output k{i}.cache_after f32[past+m+1, W].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from python_engine.ddtree import (
    accept_greedy,
    accept_walk,
    build_tree,
    build_trees,
    compact_rows,
    pad_trees,
    topk_logprobs,
    visibility_packed,
)
from python_engine.ddtree.tree import Tree
from python_engine.kdtr import write_kdtr

SEED = 20261129  # fixed: the bundles are committed and compared byte for byte
I32 = np.int32


def _sorted_logp(rng, depth: int, k: int, levels: int | None = None) -> np.ndarray:
    """Random log-probabilities, descending per row. With `levels`, values come from a small
    set so that many paths tie exactly (the rank-path tie order gets exercised)."""
    if levels:
        grid = -np.arange(1, levels + 1, dtype=np.float32) * np.float32(0.5)
        vals = rng.choice(grid, size=(depth, k))
    else:
        vals = np.log(rng.dirichlet(np.ones(max(k, 1)) * 0.3, size=depth)[:, :k] + 1e-9)
    return -np.sort(-vals.astype(np.float32), axis=1)


def _distinct_tokens(rng, depth: int, k: int, vocab: int) -> np.ndarray:
    return np.stack([rng.choice(vocab, size=k, replace=False) for _ in range(depth)]).astype(I32)


def _tree_fields(prefix: str, tree: Tree) -> dict[str, np.ndarray]:
    return {
        f"{prefix}.n": np.array([tree.n], I32),
        f"{prefix}.tokens": tree.tokens.astype(I32),
        f"{prefix}.depth": tree.depth.astype(I32),
        f"{prefix}.parent": tree.parent.astype(I32),
        f"{prefix}.score": tree.score,
        f"{prefix}.vis": visibility_packed(tree),
    }


def tree_build_bundle(rng) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    # (depth, K, budget, vocab, tie levels or None, from logits?)
    specs = [
        (5, 8, 20, 1000, None, False),  # plain
        (6, 16, 60, 1000, 3, False),  # heavy ties between paths
        (4, 8, 0, 1000, None, False),  # budget 0: root only
        (2, 3, 20, 3, None, False),  # budget > K*D and > all 12 paths: every path
        (1, 32, 32, 1000, None, False),  # D = 1: a fan
        (1, 8, 50, 8, 2, False),  # D = 1, budget over the vocab, ties
        (15, 256, 256, 5000, None, False),  # block 16, the benchmark's budget
        (32, 1024, 1024, 50000, None, False),  # the compiled maxima
        (31, 64, 1000, 64, 4, False),  # deep and tie-heavy with a small vocab
        (7, 64, 64, 300, None, True),  # from logits
        (3, 40, 40, 40, None, True),  # from logits, K = V
    ]
    for i, (depth, k, budget, vocab, levels, from_logits) in enumerate(specs):
        c = f"c{i}"
        if from_logits:
            logits = rng.normal(0.0, 3.0, size=(depth, vocab)).astype(np.float32)
            # exact duplicate logits: the lower token id must rank first
            logits[:, vocab // 2] = logits[:, 1]
            logp, tok = topk_logprobs(logits, min(budget, vocab))
            out[f"{c}.logits"] = logits
        else:
            logp = _sorted_logp(rng, depth, k, levels)
            tok = _distinct_tokens(rng, depth, k, vocab)
        root = int(rng.integers(vocab))
        tree = build_tree(logp, tok, budget, root_token=root)
        out.update({f"{c}.logp": logp.astype(np.float32), f"{c}.tok": tok.astype(I32),
                    f"{c}.budget": np.array([budget], I32), f"{c}.root": np.array([root], I32)})
        out.update(_tree_fields(c, tree))
    out["num_cases"] = np.array([len(specs)], np.int64)

    # batches: (B, depth, K, vocab, budgets)
    batches = [
        (3, 4, 8, 100, [5, 0, 8]),
        (64, 15, 256, 5000, list(rng.integers(0, 257, size=64))),
    ]
    for j, (b, depth, k, vocab, budgets) in enumerate(batches):
        budgets[1] = 0  # always a root-only request in the mix
        logp = np.stack([_sorted_logp(rng, depth, k, 6 if r % 3 == 0 else None) for r in range(b)])
        tok = np.stack([_distinct_tokens(rng, depth, k, vocab) for _ in range(b)])
        roots = rng.integers(vocab, size=b).astype(I32)
        budgets = np.array(budgets, I32)
        padded = pad_trees(build_trees(logp, tok, budgets, roots))
        p = f"b{j}"
        out.update({f"{p}.logp": logp.astype(np.float32), f"{p}.tok": tok, f"{p}.budget": budgets,
                    f"{p}.root": roots})
        out.update({f"{p}.{name}": arr for name, arr in padded.items()})
    out["num_batches"] = np.array([len(batches)], np.int64)
    return out


def _random_tree(rng, depth: int, k: int, budget: int, vocab: int) -> Tree:
    logp = _sorted_logp(rng, depth, k)
    tok = _distinct_tokens(rng, depth, k, vocab)
    return build_tree(logp, tok, budget, root_token=int(rng.integers(vocab)))


def _choice_along(tree: Tree, rng, stop_depth: int | None, vocab: int) -> np.ndarray:
    """Target choices that follow the path to the deepest node (the first at max depth),
    stopping at `stop_depth` (None: at that leaf) with a token no child carries there.
    Off-path nodes get random tokens."""
    choice = rng.integers(vocab, size=tree.n + 1)
    path = [int(np.argmax(tree.depth))]
    while path[-1] != 0:
        path.append(int(tree.parent[path[-1]]))
    path.reverse()  # root first
    if stop_depth is not None:
        path = path[: stop_depth + 1]
    for node, child in zip(path, path[1:]):
        choice[node] = tree.tokens[child]
    kids = tree.children()[path[-1]]
    absent = [t for t in range(vocab) if t not in kids]
    choice[path[-1]] = absent[int(rng.integers(len(absent)))]
    return choice.astype(np.int64)


def tree_accept_bundle(rng) -> tuple[dict[str, np.ndarray], list[tuple[Tree, list[int]]]]:
    out: dict[str, np.ndarray] = {}
    walks = []
    vocab = 64
    cases = [  # (depth, k, budget, stop depth: 0 = no match, None = full match)
        (4, 6, 30, 0),
        (4, 6, 30, None),
        (6, 8, 60, 3),
        (15, 16, 256, None),
        (15, 16, 256, 5),
        (1, 8, 8, None),
        (3, 4, 0, None),  # root-only tree: the bonus is the root's choice
    ]
    for i, (depth, k, budget, stop) in enumerate(cases):
        tree = _random_tree(rng, depth, k, budget, vocab)
        choice = _choice_along(tree, rng, stop, vocab)
        a = f"a{i}"
        if i % 2 == 1:  # greedy from logits, with an exact tie to the lowest id's benefit
            logits = rng.normal(size=(tree.n + 1, vocab)).astype(np.float32)
            rows = np.arange(tree.n + 1)
            top = logits.max(axis=1) + np.float32(1.0)
            logits[rows, choice] = top
            logits[rows, np.minimum(choice + 1, vocab - 1)] = np.where(
                choice + 1 < vocab, top, logits[rows, vocab - 1])
            out[f"{a}.logits"] = logits
            accepted, bonus = accept_greedy(tree, logits)
        else:
            accepted, bonus = accept_walk(tree, choice)
        out.update({f"{a}.tokens": tree.tokens.astype(I32), f"{a}.depth": tree.depth.astype(I32),
                    f"{a}.parent": tree.parent.astype(I32), f"{a}.choice": choice.astype(I32),
                    f"{a}.accepted": np.array(accepted, I32), f"{a}.bonus": np.array([bonus], I32)})
        walks.append((tree, accepted))
    out["num_cases"] = np.array([len(cases)], np.int64)
    return out, walks


def compaction_bundle(rng, walks: list[tuple[Tree, list[int]]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    width = 24
    for i, ((tree, accepted), past) in enumerate(zip(walks, [0, 1, 37, 100, 5, 2, 9])):
        cache = rng.normal(size=(past + 1 + tree.n, width)).astype(np.float32)
        k = f"k{i}"
        out.update({f"{k}.past": np.array([past], I32), f"{k}.accepted": np.array(accepted, I32),
                    f"{k}.cache": cache, f"{k}.cache_after": compact_rows(cache, past, accepted)})
    out["num_cases"] = np.array([len(walks)], np.int64)
    return out


def write_ddtree_refs(out_dir: Path) -> list[Path]:
    rng = np.random.default_rng(SEED)
    out_dir = Path(out_dir)
    paths = [write_kdtr(out_dir / "tree_build.kdtr", tree_build_bundle(rng))]
    accept, walks = tree_accept_bundle(rng)
    paths.append(write_kdtr(out_dir / "tree_accept.kdtr", accept))
    paths.append(write_kdtr(out_dir / "compaction.kdtr", compaction_bundle(rng, walks)))
    return paths
