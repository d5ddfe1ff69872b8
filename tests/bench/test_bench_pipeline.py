"""`kdtree bench kernels` end to end without a GPU: bench_kernels replaced by a program that
answers its case file with plausible records, the torch baselines by fixed numbers. Checks
the joining of native records with baselines, the ratios and ceilings, the goals, the
failed-case report and the files written; and that a machine without a GPU gets a clear
error and exit status 1."""

from __future__ import annotations

import json
import stat
import sys
import types
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kdtree_cli.app import app
from kdtree_cli.bench import baselines, gpu, kernels, native
from kdtree_cli.bench.suites import AttnCase, sweep

FAKE_BENCH = r'''
import json, os, sys
cases = [l.split() for l in open(sys.argv[sys.argv.index("--cases") + 1]) if l.strip()]
for suite, *kv in cases:
    rec = dict(p.split("=", 1) for p in kv)
    rec.update(suite=suite, ok=True, case=" ".join([suite] + kv))
    if suite == "gemm":
        rec.update(ms=1.4, tflops=780.0 if rec["m"] == "8192" else 620.0)
    elif suite == "copy":
        rec.update(ms=0.5, gbps=4300.0)
    elif suite == "mma":
        rec.update(ms=0.2, tflops=400.0, sms=132)
    elif suite == "launch":
        rec.update(ms=0.003 if rec["smem_kb"] == "0" else 0.004, graph_ms=0.0015, grid_blocks=132)
    elif suite == "verify_attn":
        # 0.4 ms at 64 heads, n=64, 32k; scaled by work
        work = int(rec["heads"]) * (int(rec["n"]) + 1) * int(rec["prefix"]) / (64 * 65 * 32768)
        rec.update(ms=max(0.012, 0.4 * work), tflops=500.0, cache_gbps=3000.0, splits=2, split_keys=512, config=10)
        if os.environ.get("KDTREE_DEVICE_PROFILE") == "rtx-pro-6000":  # the sm_120 plan: 1.25x the time
            rec.update(ms=1.25 * rec["ms"], config=12, splits=3)
    elif suite == "topk":
        if rec["k"] == "1024":
            rec.update(ok=False, error="topk_logprobs: launch failed (simulated)")
        rec.update(ms=0.12, logits_gbps=2400.0)
    elif suite == "tree_build":
        rec.update(ms=0.015 if rec["batch"] == "64" else 0.007, graph_ms=0.006, heap_ms=0.04 * int(rec["batch"]),
                   heap_ms_per_tree=0.04, trees_differing_from_heap=0, max_tree_depth=6)
    else:
        rec.update(ms=0.01, graph_ms=0.005, gbps=1000.0)
    print(json.dumps(rec))
'''


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    prog = tmp_path / "bench_kernels"
    prog.write_text(f"#!{sys.executable}\n{FAKE_BENCH}")
    prog.chmod(prog.stat().st_mode | stat.S_IEXEC)
    facts = {"device": "Fake GPU", "device_slug": "fake", "sms": 132, "commit": "abc", "date": "now",
             "torch": "x", "torch_cuda": "13.0", "clocks_start": {"sm_clock_mhz": 1980}}
    monkeypatch.setattr(kernels, "require_gpu", lambda what: None)
    monkeypatch.setattr(kernels, "device_facts", lambda root: dict(facts))
    monkeypatch.setattr(kernels, "nvml_clocks", lambda i: {"sm_clock_mhz": 1970})
    monkeypatch.setattr(kernels, "build_bench", lambda arch, console: prog)
    # torch two-GEMM 4x slower than the fake kernel unpadded and 3x padded (1.5x when the key count
    # is even: the padded form loses there), cuBLAS GEMMs 2x (the padded GEMMs not timed)
    monkeypatch.setattr(baselines, "torch_attention", lambda case, reps: {
        "torch_ms": 4.0 * _work(case), "cublas_ms": 2.0 * _work(case), "cublas_padded_ms": None,
        "torch_padded_ms": (3.0 if case.n % 2 == 0 else 5.0) * _work(case)})
    monkeypatch.setattr(baselines, "torch_topk", lambda case, reps: {"torch_f32_ms": 1.28, "torch_f64_ms": 2.9})
    return prog


def _work(case: AttnCase) -> float:  # the fake program's verify_attn time
    return max(0.012, 0.4 * case.heads * (case.n + 1) * case.prefix / (64 * 65 * 32768))


def test_kimi_rank_rows_have_their_roofline_and_the_faster_torch_form(fake_gpu, tmp_path):
    res, _ = kernels.run_kernel_bench(("kimi-rank",), False, tmp_path, None, Console(file=open("/dev/null", "w")))
    assert res.ceilings["mma_sync_tflops"] == 400.0 and res.ceilings["copy_gbps"] == 4300.0
    rows = res.rows["kimi"]
    assert {(r["batch"], r["query_tokens"], r["prefix"]) for r in rows} == {
        (b, t, p) for b in (1, 8) for t in (1, 2, 9, 17, 33, 65) for p in (1024, 8192, 32768, 131072)}
    for r in rows:
        case = AttnCase(8, r["query_tokens"] - 1, r["prefix"], r["batch"])
        memory, mma = case.cache_bytes / 4300e6, case.flops / 400e9
        assert r["floor_memory_ms"] == pytest.approx(memory) and r["floor_mma_ms"] == pytest.approx(mma)
        assert r["roofline_ms"] == pytest.approx(max(memory, mma))
        assert r["roofline_bound"] == ("memory" if memory >= mma else "mma")
        padded_wins = case.n % 2 == 0
        assert r["torch_form"] == ("padded" if padded_wins else "unpadded")
        assert r["vs_torch"] == pytest.approx(3.0 if padded_wins else 4.0)
        assert r["cublas_form"] == "unpadded" and r["vllm_ms"] is None and r["vs_vllm"] is None
    assert "## Kimi K2.6 per rank" in (tmp_path / "bench.md").read_text()


def test_rows_ratios_goals_and_files(fake_gpu, tmp_path):
    out = tmp_path / "out"
    res, written = kernels.run_kernel_bench(("ceilings", "attn", "topk", "tree", "accept"), False, out, None,
                                            Console(file=open("/dev/null", "w")))
    assert {p.name for p in written} == {"bench.json", "bench.md", "attention.png", "tree_topk.png"}
    assert res.ceilings == {"peak_tflops": 780.0, "verify_gemm_tflops": 620.0, "copy_gbps": 4300.0,
                            "mma_sync_tflops": 400.0,
                            "launch_ms": 0.003, "launch_graph_ms": 0.0015, "launch_smem_ms": 0.004,
                            "launch_smem_graph_ms": 0.0015, "launch_smem_kb": 200}
    assert len(res.rows["attn"]) == 32 and len(res.rows["tree"]) == 32 and len(res.rows["accept"]) == 4
    big = next(r for r in res.rows["attn"] if (r["heads"], r["n"], r["prefix"]) == (64, 64, 32768))
    assert big["vs_torch"] == pytest.approx(3.0) and big["floor_bound"] == "compute"  # the padded form won
    assert big["torch_form"] == "padded" and big["torch_unpadded_ms"] == pytest.approx(4.0 * big["kdtree_ms"])
    assert big["floor_ms"] == pytest.approx(AttnCase(64, 64, 32768).flops / 780e9)
    # 16 query rows read 38 MB of cache: memory-bound (64 heads x 2 tokens is past the ridge)
    decode = next(r for r in res.rows["attn"] if (r["heads"], r["n"], r["prefix"]) == (8, 1, 32768))
    assert decode["floor_bound"] == "memory"
    assert decode["torch_form"] == "unpadded" and decode["vs_torch"] == pytest.approx(4.0)
    assert decode["floor_ms"] == pytest.approx(32768 * 576 * 2 / 4300e6)
    # the failed top-K case is reported, not joined
    assert [e["case"] for e in res.errors] == ["topk rows=448 vocab=163840 k=1024"]
    assert len(res.rows["topk"]) == 3
    tree = next(r for r in res.rows["tree"] if (r["batch"], r["budget"], r["input"]) == (64, 256, "flat"))
    assert tree["vs_heap"] == pytest.approx(64 * 0.04 / 0.015)
    assert tree["python_ms"] > 0
    goals = {g["goal"]: g for g in res.goals()}
    assert goals["verify_attn bf16 H=64 n=64 prefix=32k: <= 0.55 ms"]["met"] is True
    assert goals["tree_build B=1 N=256 D=15 (flat): <= 8 us"]["met"] is True
    assert goals["  ... and >= 6x torch top-K + log-softmax (f32)"]["met"] is True  # 1.28 / 0.12
    saved = json.loads((out / "bench.json").read_text())
    assert saved["facts"]["clocks_end"] == {"sm_clock_mhz": 1970}
    assert len(saved["goals"]) == len(res.goals())
    md = (out / "bench.md").read_text()
    assert "| 64 | 64 | 32768 | 400.0 us |" in md and "Cases that failed" in md
    assert "empty kernel, a block a SM, timed as every case is): 3.0 us; 4.0 us with 200 KB" in md


def test_a_missing_native_record_is_an_error(fake_gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(native, "parse_records", lambda text: [])
    monkeypatch.setattr(kernels, "run_native", lambda *a, **k: [])
    res, _ = kernels.run_kernel_bench(("accept",), True, tmp_path, None, Console(file=open("/dev/null", "w")))
    assert len(res.errors) == len(sweep(("accept",), True))
    assert "no result" in res.errors[0]["error"]


def test_no_gpu_is_a_clear_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for args in (["bench", "kernels"], ["bench", "all"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code != 0
        assert isinstance(result.exception, gpu.NoGpuError)
        assert "needs a CUDA GPU" in str(result.exception)


def _fake_anchor(monkeypatch, wgmma: bool):
    """vllm_anchor's GPU side stood in for: loads give modules that say their compile env, the
    no-wgmma build times 3x the fake kernel and the own build 2x; `wgmma`: whether the own
    build used it. Returns the list of compile envs loaded."""
    from kdtree_cli.bench import vllm_anchor

    loaded = []

    def fake_load(root, compile_env=None):
        loaded.append(compile_env)
        return types.SimpleNamespace(kdtree_source=SOURCE, kdtree_compile_env=compile_env or {},
                                     _fwd_grouped_kernel_stage1=[])  # its compiled variants

    monkeypatch.setattr(vllm_anchor, "load_decode_module", fake_load)
    monkeypatch.setattr(vllm_anchor, "uses_wgmma", lambda mod: wgmma)
    monkeypatch.setattr(vllm_anchor, "compiled_kernels", lambda variants: variants)
    monkeypatch.setattr(kernels, "device_facts", lambda root: {
        "device": "Fake H200", "device_slug": "fake", "sms": 132, "commit": "abc", "date": "now",
        "compute_capability": "9.0", "clocks_start": {}})

    def fake_time(mod, case, reps, sms):
        if (case.batch, case.n, case.prefix) == (8, 64, 131072):
            raise MemoryError("simulated")
        slower = 3.0 if mod.kdtree_compile_env else 2.0  # the no-wgmma build 3x the fake kernel
        mod._fwd_grouped_kernel_stage1.append(case)
        return {"vllm_ms": slower * _work(case), "vllm_splits": 4, "vllm_page_size": 16, "vllm_rel_err": 3e-3}

    monkeypatch.setattr(vllm_anchor, "time_case", fake_time)
    monkeypatch.setattr(vllm_anchor, "compile_offline", lambda mod, cc: {
        "cc": cc, "ptx_wgmma": 0, "ptx_mma_sync": 68, "sass_hgmma": 0, "sass_hmma": 68, "shared_bytes": 53248,
        "triton": "3.9.0"})
    monkeypatch.setattr(vllm_anchor, "instructions", lambda mod, dump: {"kernel": "k", "variants": [
        {"variant": 0, "ptx_wgmma": 0 if mod.kdtree_compile_env or not wgmma else 40, "ptx_mma_sync": 36,
         "sass_hgmma": 0, "sass_hmma": 72, "num_warps": 4, "num_stages": 2}]})
    return loaded


SOURCE = "/src/vllm/v1/attention/ops/triton_decode_attention.py"


def test_without_wgmma_in_vllms_own_build_its_no_wgmma_build_is_not_timed(fake_gpu, tmp_path, monkeypatch):
    _fake_anchor(monkeypatch, wgmma=False)
    res, _ = kernels.run_kernel_bench(("kimi-rank",), True, tmp_path, None, Console(file=open("/dev/null", "w")),
                                      anchor_vllm=tmp_path)
    assert all(r["vllm_no_wgmma_ms"] is None for r in res.rows["kimi"])
    assert all(r["vs_vllm"] == pytest.approx(2.0) for r in res.rows["kimi"] if r["vllm_ms"] is not None)
    assert res.anchor["variants"][0]["ptx_wgmma"] == 0
    assert "vLLM no wgmma" not in (tmp_path / "bench.md").read_text()


def test_the_vllm_anchor_joins_its_rows(fake_gpu, tmp_path, monkeypatch):
    """--anchor-vllm and --device-profile: the module is loaded before the sweep, each kimi-rank
    row gets vLLM's time and the ratio, a row whose anchor failed is an error naming the case,
    the instructions go into the JSON and the table's header; the cases run again under the
    profile (the fake program reads KDTREE_DEVICE_PROFILE), joined beside the plain run. vLLM's
    times here are stand-ins: 2x the fake kernel."""
    from kdtree_cli.bench import vllm_anchor

    loaded = _fake_anchor(monkeypatch, wgmma=True)
    res, _ = kernels.run_kernel_bench(("kimi-rank",), True, tmp_path, None, Console(file=open("/dev/null", "w")),
                                      anchor_vllm=tmp_path, device_profile="rtx-pro-6000")
    rows = res.rows["kimi"]
    failed = [r for r in rows if r["vllm_ms"] is None]
    assert [(r["batch"], r["n"], r["prefix"]) for r in failed] == [(8, 64, 131072)]
    assert [e["case"] for e in res.errors] == ["verify_attn heads=8 n=64 prefix=131072 batch=8 dtype=bf16"] * 2
    assert [e["error"] for e in res.errors] == ["vLLM anchor: MemoryError: simulated",
                                                "vLLM anchor without wgmma: MemoryError: simulated"]
    assert loaded == [None, vllm_anchor.NO_WGMMA_ENV]  # on a Hopper GPU: also built without wgmma
    assert all(r["vs_vllm"] == pytest.approx(2.0) and r["vs_vllm_no_wgmma"] == pytest.approx(3.0)
               for r in rows if r["vllm_ms"] is not None)
    # the second native run under the profile: its times and plans beside the plain ones
    for r in rows:
        assert r["profile"] == "rtx-pro-6000" and r["profile_plan"] == "3 splits x 512 keys, config 12"
        assert r["profile_over_plain"] == pytest.approx(1.25)
        assert r["profile_vs_vllm"] == (None if r["vllm_ms"] is None else pytest.approx(2.0 / 1.25))
        assert r["profile_vs_vllm_no_wgmma"] == (None if r["vllm_ms"] is None else pytest.approx(3.0 / 1.25))
    assert rows[0]["plan"] == "2 splits x 512 keys, config 10"
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["anchor"]["source"] == SOURCE and saved["anchor"]["variants"][0]["ptx_wgmma"] == 40
    assert saved["anchor"]["no_wgmma"]["variants"][0]["ptx_wgmma"] == 0
    # the goals over every row: 2 / 1.25 = 1.6x vLLM (met), 3 / 1.25 = 2.4x its no-wgmma build, 1.25x the plain run
    goals = {g["column"]: g for g in saved["kimi_goals"]}
    assert goals["profile_vs_vllm"]["worst"] == pytest.approx(1.6) and goals["profile_vs_vllm"]["met"] is True
    assert goals["profile_vs_vllm"]["rows"] == len(rows) - 1
    assert goals["profile_vs_vllm_no_wgmma"]["worst"] == pytest.approx(2.4)
    assert goals["profile_over_plain"]["rows"] == 2 * 2 * 2  # T = 1, 2 of the quick sweep, 2 prefixes, 2 batches
    assert goals["profile_over_plain"]["worst"] == pytest.approx(1.25) and goals["profile_over_plain"]["met"] is True
    md = (tmp_path / "bench.md").read_text()
    assert "| rtx-pro-6000 >= 1.5x vLLM's Triton MLA decode at every kimi-rank row | 15 | 1.6 | yes |" in md
    assert "PTX wgmma 40" in md and "compiled with DISABLE_MMA_V3=1" in md
    assert "sm_120: PTX wgmma 0, mma.sync 68, SASS HGMMA 0, HMMA 68, 53248 B shared" in md
    assert [o["cc"] for o in saved["anchor"]["offline"]] == [120, 90]
    assert "| rtx-pro-6000 vs vLLM | rtx-pro-6000 vs vLLM no wgmma |" in md


def test_the_kimi_rank_options_need_the_kimi_rank_suite(tmp_path):
    for option, value in (("--anchor-vllm", str(tmp_path)), ("--device-profile", "rtx-pro-6000")):
        result = CliRunner().invoke(app, ["bench", "kernels", "--suite", "attn", option, value])
        assert result.exit_code == 2 and "add kimi-rank to --suite" in result.output
