"""Bundles for the kernel tests beyond the DDTree basics (ddtree_refs.py):

- verify_attn.kdtr: small verify-attention cases (prefix 0, 1, 37, 130, 64; heads 1..64;
  n 1..256; per-request prefixes in a batch), float64 reference outputs. Long prefixes are
  generated at test time on the GPU (large_attn_cases.py), never committed.
  Per case `v{i}.`: inputs q_lat bf16[B, T, H, 512], q_pe bf16[B, T, H, 64],
  kv bf16[B, rows, 576] (rows >= max prefix + T; request b's tree entries at prefix[b]..),
  prefix i32[B], vis u32[B, T, ceil(T/32)], scale f32[1]; outputs out f32[B, T, H, 512] and
  lse f32[B, T, H] (the float64 reference rounded once). Inputs are multiples of 1/32 in
  [-4, 4]: exact in bf16 (stored as bf16), so one reference serves the float32 and the bf16
  kernels; dot products of them are exact in float32.
- ddtree_chain.kdtr: the on-device chain topk_logprobs -> tree_build -> stand-in verify
  (logits of node i = bigram[tokens[i]]; its cache row = embed[tokens[i]]) -> greedy
  tree_accept -> cache_compact. Inputs draft_logits f32[B, D, V], budget/root/past i32[B],
  bigram f32[V, V], embed f32[V, W], cache f32[B, rows, W]; outputs logp/tok (the top-K),
  n [B], tokens [B, N+1], accepted i32[B, D+1] (-1 padded), accept_len/bonus i32[B],
  cache_after f32[B, rows, W] (whole buffers, so untouched rows are checked too).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from python_engine.ddtree import (
    accept_greedy,
    build_trees,
    compact_rows,
    pad_trees,
    topk_logprobs,
    visibility_packed,
)
from python_engine.ddtree.tree import Tree
from python_engine.kdtr import write_kdtr
from python_engine.verify_attn_ref import KV_LORA_RANK, QK_DIM, ROPE_DIM, verify_attn_ref

SEED = 20261130  # fixed: bundles are committed and compared byte for byte
I32 = np.int32
SOFTMAX_SCALE = np.float32(1.0 / np.sqrt(192.0))  # 1/sqrt(qk_nope 128 + qk_rope 64)


def grid_values(rng, shape) -> np.ndarray:
    """Normal-ish values on the grid k/32, |k| <= 128: exact in bf16, and every dot product
    of 576 of them is exact in float32 (so the reference's scores are exact anywhere)."""
    return (np.clip(np.round(rng.normal(size=shape) * 32.0), -128, 128) / 32.0).astype(np.float32)


def as_bf16(x: np.ndarray):
    """A torch bfloat16 tensor of values that bf16 holds exactly (KDTR stores it as bf16)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)
    if not torch.equal(t.to(torch.float32), torch.from_numpy(x)):
        raise ValueError("values are not exact in bfloat16")
    return t


def random_tree_parents(rng, n: int) -> np.ndarray:
    """parent[i] < i for i = 1..n, biased toward recent nodes (deep, bushy trees)."""
    parent = np.full(n + 1, -1, dtype=np.int64)
    for i in range(1, n + 1):
        lo = max(0, i - 1 - int(rng.integers(0, 12)))
        parent[i] = int(rng.integers(lo, i))
    return parent


def tree_vis(parent: np.ndarray) -> np.ndarray:
    """uint32 [n+1, words] ancestor mask of a parent array."""
    n = parent.size - 1
    tree = Tree(n=n, tokens=np.zeros(n + 1, np.int64), depth=np.zeros(n + 1, np.int32),
                parent=parent.astype(np.int32), score=np.zeros(n + 1, np.float32), ranks=[])
    return visibility_packed(tree)


def attn_case(rng, heads: int, n: int, prefixes: list[int]) -> dict[str, np.ndarray]:
    b = len(prefixes)
    t_len = n + 1
    rows = max(prefixes) + t_len
    words = (t_len + 31) // 32
    q_lat = grid_values(rng, (b, t_len, heads, KV_LORA_RANK))
    q_pe = grid_values(rng, (b, t_len, heads, ROPE_DIM))
    kv = grid_values(rng, (b, rows, QK_DIM))
    vis = np.stack([tree_vis(random_tree_parents(rng, n)) for _ in range(b)]).reshape(b, t_len, words)
    out = np.empty((b, t_len, heads, KV_LORA_RANK), np.float32)
    lse = np.empty((b, t_len, heads), np.float32)
    for r in range(b):
        o, l = verify_attn_ref(q_lat[r], q_pe[r], kv[r], prefixes[r], vis[r], float(SOFTMAX_SCALE))
        out[r], lse[r] = o, l
    return {"q_lat": as_bf16(q_lat), "q_pe": as_bf16(q_pe), "kv": as_bf16(kv), "prefix": np.array(prefixes, I32), "vis": vis,
            "scale": np.array([SOFTMAX_SCALE], np.float32), "out": out, "lse": lse}


# (heads, n, prefixes per request)
ATTN_CASES = [
    (8, 1, [0]),  # prefix 0: the tree alone
    (8, 8, [1]),
    (16, 8, [37]),
    (8, 64, [37]),  # a ragged last tile in both prefix and tree
    (16, 8, [37, 100]),  # per-request prefixes in one launch
    (64, 1, [130]),
    (3, 5, [64]),  # heads not a power of two
    (1, 256, [2]),  # n = 256: several tree tiles, most of them masked for most rows
    (64, 4, [0, 200]),
]


def verify_attn_bundle(rng) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i, (heads, n, prefixes) in enumerate(ATTN_CASES):
        for name, arr in attn_case(rng, heads, n, prefixes).items():
            out[f"v{i}.{name}"] = arr
    out["num_cases"] = np.array([len(ATTN_CASES)], np.int64)
    return out


def chain_bundle(rng, batch: int = 8, depth: int = 7, vocab: int = 512, width: int = 20) -> dict[str, np.ndarray]:
    """Drafts that follow the target's greedy continuation with noise, so walks end at the
    root, mid-tree and at leaves; budgets mixed, 0 included."""
    bigram = rng.normal(0.0, 3.0, size=(vocab, vocab)).astype(np.float32)
    embed = rng.normal(size=(vocab, width)).astype(np.float32)
    budgets = np.array([0, 1, 5, 17, 64, 200, 256, 100][:batch], I32)
    roots = rng.integers(vocab, size=batch).astype(I32)
    past = rng.integers(0, 40, size=batch).astype(I32)
    draft = np.empty((batch, depth, vocab), np.float32)
    for b in range(batch):
        g = int(roots[b])
        noise = [0.05, 1.0, 4.0][b % 3]
        for d in range(depth):
            draft[b, d] = bigram[g] + rng.normal(0.0, noise, size=vocab).astype(np.float32)
            g = int(np.argmax(bigram[g]))
    k = int(min(budgets.max(), vocab))
    logp = np.empty((batch, depth, k), np.float32)
    tok = np.empty((batch, depth, k), I32)
    for b in range(batch):
        lp, tk = topk_logprobs(draft[b], k)
        logp[b], tok[b] = lp, tk
    trees = build_trees(logp, tok, budgets, roots)
    max_nodes = int(budgets.max())
    padded = pad_trees(trees, max_nodes)
    rows = int(past.max()) + 1 + max_nodes
    cache = rng.normal(size=(batch, rows, width)).astype(np.float32)
    cache_after = cache.copy()
    accepted_pad = np.full((batch, depth + 1), -1, I32)
    accept_len = np.zeros(batch, I32)
    bonus = np.zeros(batch, I32)
    for b, tree in enumerate(trees):
        p = int(past[b])
        cache_after[b, p : p + tree.n + 1] = embed[tree.tokens]  # the stand-in verify's appends
        accepted, bonus[b] = accept_greedy(tree, bigram[tree.tokens])
        accepted_pad[b, : len(accepted)] = accepted
        accept_len[b] = len(accepted)
        kept = compact_rows(cache_after[b], p, accepted)
        cache_after[b, : kept.shape[0]] = kept
    return {
        "draft_logits": draft, "budget": budgets, "root": roots, "past": past, "bigram": bigram,
        "embed": embed, "cache": cache, "logp": logp, "tok": tok, "n": padded["n"],
        "tokens": padded["tokens"], "accepted": accepted_pad, "accept_len": accept_len,
        "bonus": bonus, "cache_after": cache_after,
    }


def write_kernel_refs(out_dir: Path) -> list[Path]:
    rng = np.random.default_rng(SEED)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        write_kdtr(out_dir / "verify_attn.kdtr", verify_attn_bundle(rng)),
        write_kdtr(out_dir / "ddtree_chain.kdtr", chain_bundle(rng)),
    ]
