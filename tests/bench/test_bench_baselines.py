"""The baselines compute what the kernels compute: torch's two-GEMM attention against the
float64 reference of verify_attn, and the tree inputs of the Python timing against the
reference heap's preconditions."""

from __future__ import annotations

import numpy as np
import torch

from kdtree_cli.bench.baselines import ancestor_bias, tree_inputs, tree_parents, two_gemm_attention
from kdtree_cli.bench.suites import TreeCase
from python_engine.ddtree import build_tree
from python_engine.verify_attn_ref import check_tree_mask, verify_attn_ref


def test_two_gemm_attention_matches_the_float64_reference(seed):
    g = torch.Generator().manual_seed(seed)
    heads, n, prefix = 3, 6, 40
    t_len = n + 1
    q_lat = torch.randn(t_len, heads, 512, generator=g).to(torch.bfloat16)
    q_pe = torch.randn(t_len, heads, 64, generator=g).to(torch.bfloat16)
    kv = torch.randn(prefix + t_len, 576, generator=g).to(torch.bfloat16)
    vis = ancestor_bias(t_len) == 0
    check_tree_mask(vis)  # the bench's tree is a valid tree mask
    scale = 0.07
    want, _ = verify_attn_ref(q_lat.float().numpy(), q_pe.float().numpy(), kv.float().numpy(), prefix, vis, scale)
    q = torch.cat([q_lat, q_pe], dim=-1).reshape(t_len * heads, 576)  # rows (t, h) -> t * H + h
    bias = torch.from_numpy(ancestor_bias(t_len)).repeat_interleave(heads, dim=0)
    got = two_gemm_attention(q, kv, bias, prefix, scale).float().reshape(t_len, heads, 512).numpy()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 2e-2, rel  # bf16 probabilities and output
    assert not np.allclose(got, 0)


def test_the_bench_tree_has_parents_before_children():
    parents = tree_parents(65)
    assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)


def test_python_tree_inputs_are_valid_reference_inputs(seed):
    rng = np.random.default_rng(seed)
    for kind in ("flat", "logits"):
        case = TreeCase(1, 64, 5, kind)
        (logp, tok), = tree_inputs(case, rng, 1)
        assert logp.shape == tok.shape == (5, 64)
        tree = build_tree(logp, tok, 64)  # raises on unsorted or positive rows
        assert tree.n == 64
