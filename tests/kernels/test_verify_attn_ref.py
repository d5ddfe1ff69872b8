"""The float64 verify-attention reference (python_engine/verify_attn_ref.py) against a
naive oracle: explicit loops over (token, head, key) with the mask written out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from python_engine.refgen.kernel_refs import random_tree_parents, tree_vis
from python_engine.verify_attn_ref import (
    check_tree_mask,
    unpack_vis,
    verify_attn_ref,
    verify_attn_ref_torch,
)


def naive(q_lat, q_pe, kv, prefix, parent, scale):
    """Per query row: the visible keys listed by walking the ancestors, softmax by hand."""
    t_len, heads, rank = q_lat.shape
    out = np.zeros((t_len, heads, rank))
    lse = np.zeros((t_len, heads))
    for t in range(t_len):
        visible = list(range(prefix))
        a = t
        while a >= 0:
            visible.append(prefix + a)
            a = int(parent[a])
        for h in range(heads):
            s = [scale * (float(q_lat[t, h] @ kv[j, :rank]) + float(q_pe[t, h] @ kv[j, rank:])) for j in visible]
            top = max(s)
            w = [math.exp(x - top) for x in s]
            total = sum(w)
            lse[t, h] = top + math.log(total)
            out[t, h] = sum(wi / total * kv[j, :rank] for wi, j in zip(w, visible))
    return out, lse


@pytest.mark.parametrize("heads,n,prefix", [(2, 0, 5), (3, 6, 0), (1, 12, 9), (4, 40, 3)])
def test_reference_matches_naive_softmax(rng, heads, n, prefix):
    rank, rope = 16, 8  # small widths: the reference only needs R + rope columns
    q_lat = rng.normal(size=(n + 1, heads, rank))
    q_pe = rng.normal(size=(n + 1, heads, rope))
    kv = rng.normal(size=(prefix + n + 1 + 3, rank + rope))  # extra rows past the tree are ignored
    parent = random_tree_parents(rng, n)
    scale = 0.3
    out, lse = verify_attn_ref(q_lat, q_pe, kv, prefix, tree_vis(parent), scale)
    want_out, want_lse = naive(q_lat, q_pe, kv, prefix, parent, scale)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_dense_and_packed_masks_agree(rng):
    n = 70  # three words per row
    parent = random_tree_parents(rng, n)
    packed = tree_vis(parent)
    dense = unpack_vis(packed, n + 1)
    check_tree_mask(dense)
    q_lat, q_pe = rng.normal(size=(n + 1, 2, 16)), rng.normal(size=(n + 1, 2, 8))
    kv = rng.normal(size=(n + 1 + 4, 24))
    a = verify_attn_ref(q_lat, q_pe, kv, 4, packed, 0.2)
    b = verify_attn_ref(q_lat, q_pe, kv, 4, dense, 0.2)
    np.testing.assert_array_equal(a[0], b[0])


def test_invalid_tree_masks_are_rejected():
    dense = np.eye(3, dtype=bool)
    dense[2, 0] = True  # row 2 sees the root but not... fine; now break row 1
    dense[1, 0] = False
    with pytest.raises(ValueError):
        check_tree_mask(dense)
    future = np.tril(np.ones((3, 3), dtype=bool))
    future[0, 2] = True  # the root sees a later node
    with pytest.raises(ValueError):
        check_tree_mask(future)


def test_torch_reference_matches_numpy(rng):
    torch = pytest.importorskip("torch")
    n, heads, prefix = 20, 3, 33
    q_lat = rng.normal(size=(n + 1, heads, 32))
    q_pe = rng.normal(size=(n + 1, heads, 8))
    kv = rng.normal(size=(prefix + n + 1, 40))
    parent = random_tree_parents(rng, n)
    vis = tree_vis(parent)
    want_out, want_lse = verify_attn_ref(q_lat, q_pe, kv, prefix, vis, 0.15)
    dense = torch.from_numpy(unpack_vis(vis, n + 1))
    out, lse = verify_attn_ref_torch(torch.from_numpy(q_lat), torch.from_numpy(q_pe), torch.from_numpy(kv), prefix,
                                     dense, 0.15, row_chunk=7)  # chunks that cut through tokens
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-12, atol=1e-12)
