"""The baselines compute what the kernels compute: torch's two-GEMM attention against the
float64 reference of verify_attn, and the tree inputs of the Python timing against the
reference heap's preconditions."""

from __future__ import annotations

import numpy as np
import torch

from kdtree_cli.bench.baselines import (KEY_PAD, ancestor_bias, pad_keys, padded_keys, tree_inputs, tree_parents,
                                       two_gemm_attention)
from kdtree_cli.bench import baselines, timing
from kdtree_cli.bench.suites import AttnCase, TreeCase
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


def test_the_padded_form_gives_the_unpadded_result(seed):
    """Keys padded to a multiple of KEY_PAD with zero rows and -inf scores: the same attention,
    in float32 to the rounding of a longer reduction, in bf16 as close to the float64 reference
    as the unpadded form; batched (a leading request dim) as well as one request."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        heads, n, batch = int(rng.integers(1, 5)), int(rng.integers(0, 9)), int(rng.integers(1, 3))
        prefix = int(rng.integers(1, 60))
        t_len = n + 1
        keys = prefix + t_len
        q = torch.randn(batch, t_len * heads, 576, generator=g)
        kv = torch.randn(batch, keys, 576, generator=g)
        bias = torch.from_numpy(ancestor_bias(t_len)).repeat_interleave(heads, dim=0)
        kv_p, bias_p = pad_keys(kv[0], bias)
        assert kv_p.shape[0] == padded_keys(keys) and kv_p.shape[0] % KEY_PAD == 0 and kv_p.shape[0] - keys < KEY_PAD
        assert torch.equal(kv_p[:keys], kv[0]) and bias_p.shape == (bias.shape[0], kv_p.shape[0] - prefix)
        kv_pb = torch.cat([kv, kv.new_zeros(batch, kv_p.shape[0] - keys, 576)], dim=1)
        want = two_gemm_attention(q, kv, bias, prefix, 0.07)
        got = two_gemm_attention(q, kv_pb, bias_p, prefix, 0.07)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5)
        one = two_gemm_attention(q[0], kv_p, bias_p, prefix, 0.07)
        torch.testing.assert_close(one, want[0], rtol=1e-4, atol=2e-5)
        # bf16, as the bench runs it: both forms as close to the float64 reference
        qb, kvb, kvpb = q[0].bfloat16(), kv[0].bfloat16(), kv_p.bfloat16()
        vis = ancestor_bias(t_len) == 0
        q3 = qb.float().reshape(t_len, heads, 576).numpy()
        ref, _ = verify_attn_ref(q3[..., :512], q3[..., 512:], kvb.float().numpy(), prefix, vis, 0.07)
        for out in (two_gemm_attention(qb, kvb, bias, prefix, 0.07), two_gemm_attention(qb, kvpb, bias_p, prefix, 0.07)):
            got = out.float().reshape(t_len, heads, 512).numpy()
            assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 2e-2


def test_the_baseline_times_both_forms_of_the_same_attention(seed, monkeypatch):
    """torch_attention on the CPU, each timed function run once by a recording clock: the
    unpadded and padded attentions it times give the same output (one request and a batch),
    the padded GEMMs are as wide as the padded keys, and a key count already a multiple of
    KEY_PAD is timed once."""
    rng = np.random.default_rng(seed)
    ran = []

    def run_once(fn, reps, warm=3):
        ran.append(fn(0))
        return timing.Timing(1.0, 1.0, 1.0, reps)

    monkeypatch.setattr(timing, "time_cuda", run_once)
    for batch in (1, int(rng.integers(2, 4))):
        heads, n = int(rng.integers(1, 5)), int(rng.integers(0, 9))
        prefix = int(rng.integers(1, 6)) * KEY_PAD + int(rng.integers(0, KEY_PAD - 1)) - n  # keys not aligned, few
        prefix += KEY_PAD if prefix < 1 else 0
        keys = prefix + n + 1
        ran.clear()
        out = baselines.torch_attention(AttnCase(heads, n, prefix, batch), 1, device="cpu")
        attn, gemms, attn_p, gemms_p = ran
        lead = (batch,) if batch > 1 else ()
        assert attn.shape == attn_p.shape == (*lead, (n + 1) * heads, 512)
        torch.testing.assert_close(attn_p.float(), attn.float(), rtol=8e-3, atol=1e-3)  # a bf16 ulp
        assert gemms[0].shape[-1] == keys and gemms_p[0].shape[-1] == out["padded_keys"] == padded_keys(keys)
        assert None not in (out["torch_padded_ms"], out["cublas_padded_ms"])
    ran.clear()
    out = baselines.torch_attention(AttnCase(2, KEY_PAD - 1, 3 * KEY_PAD, 1), 1, device="cpu")
    assert len(ran) == 2 and out["torch_padded_ms"] is None and out["cublas_padded_ms"] is None


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
