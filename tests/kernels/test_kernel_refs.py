"""The kernel bundles of python_engine/refgen/kernel_refs.py: deterministic, consistent with
the DDTree reference, and the committed copies in refs/ are current."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from python_engine.ddtree import build_trees, compact_rows, topk_logprobs
from python_engine.kdtr import read_kdtr
from python_engine.refgen import kernel_refs
from python_engine.refgen.tree_fuzz_cases import write_fuzz_bundle
from python_engine.verify_attn_ref import unpack_vis, verify_attn_ref
from python_engine.project import PROJECT_ROOT

REFS = PROJECT_ROOT / "refs"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kernel_refs")
    kernel_refs.write_kernel_refs(out)
    return out


@pytest.mark.parametrize("name", ["verify_attn.kdtr", "ddtree_chain.kdtr"])
def test_committed_bundles_are_current(generated, name):
    committed = REFS / name
    if not committed.exists():
        pytest.skip(f"refs/{name} not generated yet (kdtree refs)")
    assert committed.read_bytes() == (generated / name).read_bytes(), f"refs/{name} is stale: run `kdtree refs`"


def test_attention_cases_are_bf16_exact_and_reference_consistent(generated):
    b = read_kdtr(generated / "verify_attn.kdtr")
    for i in range(int(b["num_cases"][0])):
        c = f"v{i}"
        q_lat = (b[f"{c}.q_lat"].astype(np.uint32) << 16).view(np.float32)  # bf16 bits
        q_pe = (b[f"{c}.q_pe"].astype(np.uint32) << 16).view(np.float32)
        kv = (b[f"{c}.kv"].astype(np.uint32) << 16).view(np.float32)
        assert np.all(np.abs(q_lat) <= 4) and np.any(q_lat != 0)
        for r, prefix in enumerate(b[f"{c}.prefix"]):
            t_len = q_lat.shape[1]
            dense = unpack_vis(b[f"{c}.vis"][r], t_len)
            assert dense[np.arange(t_len), np.arange(t_len)].all()
            out, lse = verify_attn_ref(q_lat[r], q_pe[r], kv[r], int(prefix), dense, float(b[f"{c}.scale"][0]))
            np.testing.assert_allclose(b[f"{c}.out"][r], out, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(b[f"{c}.lse"][r], lse, rtol=1e-6)


def test_chain_bundle_is_the_reference_pipeline(generated):
    b = read_kdtr(generated / "ddtree_chain.kdtr")
    batch, depth, _ = b["draft_logits"].shape
    k = b["logp"].shape[2]
    for r in range(batch):
        logp, tok = topk_logprobs(b["draft_logits"][r], k)
        np.testing.assert_array_equal(logp, b["logp"][r])
        np.testing.assert_array_equal(tok, b["tok"][r])
    trees = build_trees(b["logp"], b["tok"], b["budget"], b["root"])
    assert [t.n for t in trees] == list(b["n"])
    lens = b["accept_len"]
    assert lens.min() == 1 and lens.max() >= 4, "walks should stop at the root and deep in the tree"
    for r, tree in enumerate(trees):
        acc = b["accepted"][r][: lens[r]]
        assert acc[0] == 0 and np.all(np.diff(acc) > 0)
        past = int(b["past"][r])
        appended = b["cache"][r].copy()
        appended[past : past + tree.n + 1] = b["embed"][tree.tokens]
        kept = compact_rows(appended, past, acc)
        np.testing.assert_array_equal(b["cache_after"][r][: kept.shape[0]], kept)
        np.testing.assert_array_equal(b["cache_after"][r][kept.shape[0]:], appended[kept.shape[0]:])


def test_fuzz_bundle_is_reproducible_from_its_seed(tmp_path, seed):
    a = write_fuzz_bundle(tmp_path / "a.kdtr", 12, seed)
    b = write_fuzz_bundle(tmp_path / "b.kdtr", 12, seed)
    assert a.read_bytes() == b.read_bytes()
    cases = read_kdtr(a)
    assert int(cases["num_cases"][0]) == 12 and int(cases["seed"][0]) == seed
