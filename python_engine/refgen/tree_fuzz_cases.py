"""Random tree_build cases from a logged seed (never committed): the schema of
refs/tree_build.kdtr's single cases (c{i}.*), drawn to stress the tie handling of the GPU
kernel's threshold selection: exact zeros (log-probability 0 absorbs into any score), -inf
entries, values from a tiny grid (many exactly tied paths), slowly falling rows (wide trees
whose levels overflow the pool), D = 1, budgets past the number of paths, and the compiled
maxima.

A share of the cases also carries the drafter's logits (c{i}.logits, f32 [D, V]): the kernels
then go through topk_logprobs first, whose one-pass selection is stressed by long rows
(several candidate compactions), rows sorted ascending (a compaction every step), exact
ties and -inf across the K-th place, and neighbouring float32 logits that round to the same
log-probability (the reference orders those by token id, not by logit).

    python -m python_engine.refgen.tree_fuzz_cases OUT.kdtr [--cases N] [--seed S]
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

import numpy as np

from python_engine.ddtree import build_tree, topk_logprobs, visibility_packed
from python_engine.kdtr import write_kdtr

I32 = np.int32
MAX_NODES = 1024
MAX_DEPTH = 32
LOGITS_SHARE = 0.25  # cases that start from logits (topk_logprobs, then the tree)


def _row_values(rng, k: int, style: str) -> np.ndarray:
    if style == "grid":  # few distinct values: ties everywhere
        vals = -rng.integers(0, 4, size=k).astype(np.float32) * np.float32(0.5)
    elif style == "zeros":  # confident rows: a leading 0 (absorbed by any score), then grid
        vals = -rng.integers(0, 3, size=k).astype(np.float32)
        vals[0] = 0.0
    elif style == "inf":  # zero-probability tail
        vals = -np.abs(rng.normal(0, 3, size=k)).astype(np.float32)
        vals[rng.random(k) < 0.3] = -np.inf
    elif style == "flat":  # slowly falling rows (exponential gaps): wide, shallow trees that
        # overflow a level at a time (the GPU kernel's threshold raises)
        vals = -np.cumsum(rng.exponential(rng.choice([0.02, 0.08, 0.3]), size=k)).astype(np.float32)
    elif style == "tiny":  # magnitudes under one ulp of typical scores: fadd rounding ties
        vals = -np.abs(rng.normal(0, 1e-7, size=k)).astype(np.float32)
        vals[: max(1, k // 4)] = -rng.integers(1, 3, size=max(1, k // 4)).astype(np.float32)
    else:  # "plain" continuous
        vals = np.log(rng.dirichlet(np.ones(k) * 0.5) + 1e-12).astype(np.float32)
    return -np.sort(-np.minimum(vals, np.float32(0.0)))


def _logits_rows(rng, depth: int, vocab: int, k: int, style: str) -> np.ndarray:
    if style == "collide":  # adjacent float32 logits whose log-probabilities round together
        # pairs in [0.5, 1) over a lower background: x - lse lies in a coarser binade than x
        x = rng.normal(-2.0, 1.0, size=(depth, vocab)).astype(np.float32)
        for r in range(depth):
            top = rng.choice(vocab, size=min(vocab, 2 * k), replace=False)
            base = rng.uniform(0.5, 1.0, size=top.size // 2).astype(np.float32)
            for j, b in enumerate(base):  # the larger logit at the higher token id
                lo, hi = sorted(top[2 * j: 2 * j + 2])
                x[r, lo], x[r, hi] = b, np.nextafter(b, np.float32(np.inf))
        return x
    if style == "ties":  # a few distinct values: exact ties across the K-th place
        return rng.integers(-3, 2, size=(depth, vocab)).astype(np.float32)
    if style == "ninf":  # fewer finite logits than K, sometimes
        x = rng.normal(0.0, 2.0, size=(depth, vocab)).astype(np.float32)
        x[rng.random((depth, vocab)) < rng.choice([0.5, 0.99])] = -np.inf
        x[:, rng.integers(vocab)] = np.float32(1.0)  # never a row of only -inf
        return x
    if style == "ascending":  # every logit beats the last threshold
        return np.sort(rng.normal(0.0, 3.0, size=(depth, vocab)).astype(np.float32), axis=1)
    if style == "equal":
        return np.full((depth, vocab), np.float32(rng.normal()), np.float32)
    return rng.normal(0.0, 2.5, size=(depth, vocab)).astype(np.float32)  # "normal"


def logits_case(rng) -> dict[str, np.ndarray]:
    style = str(rng.choice(["collide", "ties", "ninf", "ascending", "equal", "normal"]))
    vocab = int(rng.choice([3, 97, 1031, 4096, 9000, 20000]))
    budget = int(min(vocab, rng.choice([1, 7, 64, 256, MAX_NODES])))
    depth = int(rng.choice([1, 2, 3]))
    logits = _logits_rows(rng, depth, vocab, budget, style)
    logp, tok = topk_logprobs(logits, budget)
    root = int(rng.integers(vocab))
    with np.errstate(invalid="ignore"):  # -inf - -inf in the reference's sortedness check
        tree = build_tree(logp, tok, budget, root_token=root)
    return {
        "logits": logits, "logp": logp, "tok": tok.astype(I32), "budget": np.array([budget], I32),
        "root": np.array([root], I32), "n": np.array([tree.n], I32), "tokens": tree.tokens.astype(I32),
        "depth": tree.depth.astype(I32), "parent": tree.parent.astype(I32), "score": tree.score.astype(np.float32),
        "vis": visibility_packed(tree),
    }


def fuzz_case(rng) -> dict[str, np.ndarray]:
    if rng.random() < LOGITS_SHARE:
        return logits_case(rng)
    style = rng.choice(["grid", "zeros", "inf", "tiny", "plain", "flat", "mixed"])
    depth = int(rng.choice([1, 2, 3, 5, 8, 15, MAX_DEPTH]))
    budget = int(rng.choice([0, 1, 2, 7, 33, 100, 256, 512, MAX_NODES]))
    k = int(max(1, min(budget if budget else 4, rng.choice([1, 2, 3, 8, 64, 1024]))))
    if rng.random() < 0.5:  # as the engine calls it: K = the budget (the kernel's one-sweep search)
        k = max(1, budget)
    rows = []
    for _ in range(depth):
        row_style = rng.choice(["grid", "zeros", "inf", "tiny", "plain", "flat"]) if style == "mixed" else style
        rows.append(_row_values(rng, k, row_style))
    logp = np.stack(rows).astype(np.float32)
    if np.isinf(logp[:, 0]).any():  # keep the best entry of each row finite
        logp[:, 0] = np.where(np.isinf(logp[:, 0]), np.float32(-1.0), logp[:, 0])
        logp = -np.sort(-logp, axis=1)
    vocab = max(k, 5000)
    tok = np.stack([rng.choice(vocab, size=k, replace=False) for _ in range(depth)]).astype(I32)
    root = int(rng.integers(vocab))
    with np.errstate(invalid="ignore"):  # -inf - -inf in the reference's sortedness check
        tree = build_tree(logp, tok, budget, root_token=root)
    return {
        "logp": logp, "tok": tok, "budget": np.array([budget], I32), "root": np.array([root], I32),
        "n": np.array([tree.n], I32), "tokens": tree.tokens.astype(I32), "depth": tree.depth.astype(I32),
        "parent": tree.parent.astype(I32), "score": tree.score.astype(np.float32),
        "vis": visibility_packed(tree),
    }


def write_fuzz_bundle(path: Path, cases: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for i in range(cases):
        for name, arr in fuzz_case(rng).items():
            out[f"c{i}.{name}"] = arr
    out["num_cases"] = np.array([cases], np.int64)
    out["num_batches"] = np.array([0], np.int64)
    out["seed"] = np.array([seed], np.int64)
    return write_kdtr(path, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None, help="default: fresh, printed")
    args = ap.parse_args(argv)
    seed = secrets.randbits(32) if args.seed is None else args.seed
    print(f"tree fuzz cases: seed {seed} ({args.cases} cases) -> {args.out}", file=sys.stderr)
    write_fuzz_bundle(args.out, args.cases, seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
