"""The vLLM anchor's arguments, built on the CPU: the paged cache holds our latent cache's rows,
the decode rows read what the chain reference attends to, vLLM's split rule, the module lookup
and the refusal of vllm imports it does not stand in for. The kernel itself runs on a GPU only
(`kdtree bench kernels --suite kimi-rank --anchor-vllm DIR`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kdtree_cli.bench import vllm_anchor
from kdtree_cli.bench.vllm_anchor import (chain_attention_f32, count_mma, decode_rows, find_decode_module,
                                          gather_pages, load_decode_module, num_kv_splits, page_cache, page_order)
from python_engine.errors import KdtreeError
from python_engine.verify_attn_ref import verify_attn_ref


def _case(rng):
    batch, t_len, heads = int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
    prefix, page = int(rng.integers(1, 80)), int(rng.choice([1, 4, 16]))
    return batch, t_len, heads, prefix, page


def test_the_paged_cache_holds_the_latent_rows(seed):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    for _ in range(4):
        batch, t_len, _, prefix, page = _case(rng)
        length = prefix + t_len
        kv = torch.randn(batch, length, 576, generator=g)
        order = page_order(batch, length, page, g)
        pages, table = page_cache(kv, page, order)
        per = -(-length // page)
        assert pages.shape == (batch * per, page, 576) and table.shape == (batch, per) and table.dtype == torch.int32
        assert sorted(table.flatten().tolist()) == list(range(batch * per))  # every page once
        assert torch.equal(gather_pages(pages, table, length), kv)
        tail = length - (per - 1) * page  # rows past the cache in each request's last page are zero
        assert not pages[table[:, -1].long(), tail:].any()


def test_the_decode_rows_read_what_the_chain_reference_attends_to(seed):
    """Row (b, t) of the flattened block, through its block-table row and seq_len, reads the
    keys the chain reference gives token t of request b: attention over those rows, computed
    row by row in float64, equals chain_attention_f32."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    scale = 0.07
    for _ in range(3):
        batch, t_len, heads, prefix, page = _case(rng)
        length = prefix + t_len
        q = torch.randn(batch, t_len, heads, 576, generator=g)
        kv = torch.randn(batch, length, 576, generator=g)
        pages, table = page_cache(kv, page, page_order(batch, length, page, g))
        rows_q, rows_table, seq_lens = decode_rows(q, table, prefix)
        assert rows_q.shape == (batch * t_len, heads, 576) and rows_table.shape == (batch * t_len, table.shape[1])
        assert seq_lens.tolist() == [prefix + t + 1 for _ in range(batch) for t in range(t_len)]
        want = chain_attention_f32(q, kv, prefix, scale)
        for r in range(batch * t_len):
            keys = gather_pages(pages, rows_table[r:r + 1], int(seq_lens[r]))[0].double()
            s = rows_q[r].double() @ keys.T * scale
            got = torch.softmax(s, dim=-1) @ keys[:, :512]
            torch.testing.assert_close(got.float(), want[r // t_len, r % t_len], rtol=1e-4, atol=2e-5)


def test_the_chain_reference_is_the_float64_reference_of_a_chain(seed):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    batch, t_len, heads, prefix, _ = _case(rng)
    q = torch.randn(batch, t_len, heads, 576, generator=g)
    kv = torch.randn(batch, prefix + t_len, 576, generator=g)
    got = chain_attention_f32(q, kv, prefix, 0.06)
    vis = np.tril(np.ones((t_len, t_len), bool))  # a chain: each token sees itself and the ones before
    for b in range(batch):
        want, _ = verify_attn_ref(q[b, ..., :512].numpy(), q[b, ..., 512:].numpy(), kv[b].numpy(), prefix, vis, 0.06)
        np.testing.assert_allclose(got[b].numpy(), want, rtol=1e-4, atol=2e-5)


def test_the_split_rule(rng):
    for _ in range(50):
        length, sms = int(rng.integers(1, 1 << 20)), int(rng.integers(1, 200))
        want = 1
        while want < max(1, length // 512):
            want *= 2
        assert num_kv_splits(length, sms) == min(want, 2 * sms)


def test_the_decode_module_is_found_in_either_layout(tmp_path):
    for rel in vllm_anchor.DECODE_MODULE_PATHS:
        root = tmp_path / rel.split("/")[2]
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text("def decode_attention_fwd(): pass\n")
        assert find_decode_module(root) == root / rel
    with pytest.raises(KdtreeError, match="no vLLM Triton decode kernel"):
        find_decode_module(tmp_path / "empty")


def test_a_vllm_import_the_anchor_does_not_stand_in_for_is_refused(tmp_path):
    path = tmp_path / vllm_anchor.DECODE_MODULE_PATHS[0]
    path.parent.mkdir(parents=True)
    path.write_text("from vllm.platforms import current_platform\nfrom vllm.triton_utils import tl, triton\n"
                    "from vllm.envs import VLLM_SOMETHING\ndef decode_attention_fwd(): pass\n")
    with pytest.raises(KdtreeError, match="vllm.envs: VLLM_SOMETHING"):
        load_decode_module(tmp_path)


def test_mma_instructions_are_counted():
    ptx = "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {...};\nmma.sync.aligned.m16n8k16 ...\n" * 3
    sass = "HMMA.16816.F32.BF16 R0, R4, R8, R0 ;\nHGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], R24 ;\n" * 2
    assert count_mma(ptx, sass) == {"ptx_wgmma": 3, "ptx_mma_sync": 3, "sass_hgmma": 2, "sass_hmma": 2}
    assert count_mma("", "") == {"ptx_wgmma": 0, "ptx_mma_sync": 0, "sass_hgmma": 0, "sass_hmma": 0}


def test_vllms_kernel_in_the_triton_interpreter_matches_the_chain_reference(seed, monkeypatch):
    """vLLM's own decode_attention_fwd, run by Triton's interpreter on the CPU through the
    anchor's loader and arguments, in float32 and float16 (the interpreter's bf16 is not the GPU's), against
    chain_attention_f32. Needs triton and a vLLM tree in $KDTREE_ANCHOR_VLLM (the folder given
    to --anchor-vllm); the GPU run checks the same in bf16 on every kimi-rank row."""
    import os

    root = os.environ.get("KDTREE_ANCHOR_VLLM")
    if not root:
        pytest.skip("set KDTREE_ANCHOR_VLLM to a vLLM tree to run vLLM's kernel in the Triton interpreter")
    import sys

    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("triton was imported without TRITON_INTERPRET=1 (its own @jit helpers are compiled-mode "
                    "now): run this test in a process of its own")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # before triton's first import: its language helpers see it
    pytest.importorskip("triton")
    module = load_decode_module(root)
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    # float32: to the rounding of the sums; float16 (the interpreter's half is numpy's): within
    # its rounding of p and the output, 3e-3 of the largest output
    for dtype, tol in ((torch.float32, 2e-5), (torch.float16, 3e-3)):
        batch, t_len, _, prefix, _ = _case(rng)
        heads, page = int(rng.choice([4, 8, 16])), 16
        length = prefix + t_len
        q = torch.randn(batch, t_len, heads, 576, generator=g).to(dtype)
        kvs = [torch.randn(batch, length, 576, generator=g).to(dtype) for _ in range(2)]
        call = vllm_anchor.prepare_call(q, kvs, prefix, page, int(rng.integers(1, 200)),
                                        page_order(batch, length, page, g))
        for i, kv in enumerate(kvs):
            vllm_anchor.launch(module, call, i, 0.07)
            want = chain_attention_f32(q, kv, prefix, 0.07)
            err = (vllm_anchor.output(call, batch) - want).abs().max() / want.abs().max()
            assert err < tol, (dtype, float(err))


def test_compiled_variants_are_read_from_triton_caches():
    """Triton 3.x keeps a JITFunction's compiled kernels in device_caches[device][0] (older
    releases in cache[device]); uses_wgmma reads their PTX."""
    import types

    def kernel(ptx):
        return types.SimpleNamespace(asm={"ptx": ptx, "cubin": b""})

    mma, wg = kernel("mma.sync.aligned.m16n8k16"), kernel("wgmma.mma_async.sync.aligned.m64n64k16")
    new = types.SimpleNamespace(device_caches={0: ({"k1": mma, "k2": wg}, {}, "target", "backend", None)})
    old = types.SimpleNamespace(cache={0: {"k1": mma}})
    assert vllm_anchor.compiled_kernels(new) == [mma, wg] and vllm_anchor.compiled_kernels(old) == [mma]
    stage1 = vllm_anchor.STAGE1_KERNEL
    assert vllm_anchor.uses_wgmma(types.SimpleNamespace(**{stage1: new}))
    assert not vllm_anchor.uses_wgmma(types.SimpleNamespace(**{stage1: old}))


def test_vllms_kernel_compiled_for_an_sm_120_has_no_wgmma(monkeypatch):
    """Triton compiles vLLM's stage-1 kernel without a GPU for sm_120 (no wgmma there) and sm_90:
    mma.sync in both PTX and SASS for sm_120, and its shared memory within an sm_120 block's
    101,376 bytes. Needs triton and $KDTREE_ANCHOR_VLLM, as the interpreter test."""
    import os

    root = os.environ.get("KDTREE_ANCHOR_VLLM")
    if not root:
        pytest.skip("set KDTREE_ANCHOR_VLLM to a vLLM tree to compile vLLM's kernel")
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1: no compiled kernels in this process")
    module = load_decode_module(root)
    sm120 = vllm_anchor.compile_offline(module, 120)
    assert sm120["ptx_wgmma"] == 0 and sm120["ptx_mma_sync"] > 0 and sm120["sass_hgmma"] == 0
    assert sm120["sass_hmma"] in (0, sm120["ptx_mma_sync"])  # 0: no cuobjdump to read the SASS with
    assert 0 < sm120["shared_bytes"] <= 101376
    sm90 = vllm_anchor.compile_offline(module, 90)
    assert sm90["ptx_wgmma"] + sm90["ptx_mma_sync"] > 0
