"""`kdtree bench kernels` as a plain function: the native cases through bench_kernels, the
baselines in this process, then rows, goals and the written report."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.console import Console

from python_engine.project import PROJECT_ROOT

from . import baselines, report, vllm_anchor
from .gpu import device_facts, nvml_clocks, require_gpu
from .provenance import run_record
from .native import build_bench, record_key, run_native
from .suites import (AcceptCase, AttnCase, Case, CompactCase, CopyCase, GemmCase, KimiAttnCase, LaunchCase, MmaCase,
                     TopkCase, TreeCase, sweep)

DEFAULT_RESULTS = PROJECT_ROOT / "results"
DEVICE_PROFILE_ENV = "KDTREE_DEVICE_PROFILE"  # csrc/common/device_profile.h: plan as on the named device
NATIVE_TIMEOUT_S = 300.0  # the whole native sweep (~1-2 minutes on an H200); a hung kernel must not hang the bench


def default_out_dir(facts: dict) -> Path:
    return DEFAULT_RESULTS / facts["device_slug"] / "bench"


def _baseline_reps(case: Case, quick: bool) -> int:
    if isinstance(case, AttnCase):
        heavy = case.prefix * (case.n + 1) * case.heads >= 32768 * 65 * 64
        return 3 if quick or heavy else 10
    return 5 if quick else 20


def _anchor_case(anchor, case: KimiAttnCase, reps: int, facts: dict, res: report.BenchResult,
                 label: str = "vLLM anchor") -> dict:
    """vLLM's kernel on the case; a failure is the row's error (under `label`), not the run's."""
    try:
        return vllm_anchor.time_case(anchor, case, reps, facts["sms"])
    except Exception as exc:  # a Triton compile error or out of memory at one shape: recorded, the rest go on
        res.errors.append({"case": case.native_line(), "error": f"{label}: {type(exc).__name__}: {exc}"})
        return {}


def _profile_records(program: Path, cases: list[Case], quick: bool, profile: str, log_dir: Path | None,
                     res: report.BenchResult) -> dict:
    """The kimi-rank cases run again by bench_kernels with KDTREE_DEVICE_PROFILE=profile (the
    plans and limits of that device on this GPU's silicon): {case key: record}; failed cases
    are errors naming the profile."""
    kimi = [c for c in cases if isinstance(c, KimiAttnCase)]
    if not kimi:
        return {}
    records = run_native(program, kimi, quick, NATIVE_TIMEOUT_S,
                         log=(log_dir / f"bench_kernels-{profile}.log") if log_dir else None,
                         env={**os.environ, DEVICE_PROFILE_ENV: profile})
    out = {}
    for case in kimi:
        rec = next((r for r in records if record_key(r, case) == case.key()), None)
        if rec is None or not rec.get("ok"):
            res.errors.append({"case": f"{DEVICE_PROFILE_ENV}={profile} {case.native_line()}",
                               "error": (rec or {}).get("error", "no result (the program stopped before it)")})
        else:
            out[case.key()] = rec
    return out


def run_kernel_bench(suites: tuple[str, ...], quick: bool, out_dir: Path | None, arch: str | None,
                     console: Console, log_dir: Path | None = None, anchor_vllm: Path | None = None,
                     device_profile: str | None = None) -> tuple[report.BenchResult, list[Path]]:
    """Measure, compare, write. Returns the result and the files written. anchor_vllm: a vLLM
    source tree whose Triton MLA decode kernel is timed on the kimi-rank cases (vllm_anchor).
    device_profile: the kimi-rank cases also run under KDTREE_DEVICE_PROFILE=device_profile,
    their times beside the plain ones."""
    require_gpu("kdtree bench kernels")
    facts = device_facts(PROJECT_ROOT)
    console.print(f"[bold]bench[/] on {facts['device']} ({facts['sms']} SMs), commit {facts['commit']}", highlight=False)
    anchor = anchor_no_wgmma = None
    if anchor_vllm is not None:  # loaded before the native sweep: a wrong folder fails at once

        anchor = vllm_anchor.load_decode_module(anchor_vllm)
        console.print(f"[dim]anchor: vLLM's decode_attention_fwd from {anchor.kdtree_source}[/]", highlight=False)
        if facts.get("compute_capability", "").startswith("9."):  # Hopper: also as built without wgmma
            anchor_no_wgmma = vllm_anchor.load_decode_module(anchor_vllm, vllm_anchor.NO_WGMMA_ENV)
    program = build_bench(arch, console)
    cases = sweep(suites, quick)
    console.print(f"[dim]native: {len(cases)} cases through {program.name}[/]", highlight=False)
    t0 = time.perf_counter()
    records = run_native(program, cases, quick, NATIVE_TIMEOUT_S,
                         log=(log_dir / "bench_kernels.log") if log_dir else None)
    console.print(f"[dim]native done in {time.perf_counter() - t0:.0f} s[/]", highlight=False)
    res = report.BenchResult(facts=facts, run=run_record())
    profiled = {}
    if device_profile:
        res.facts["device_profile"] = device_profile
        t0 = time.perf_counter()
        profiled = _profile_records(program, cases, quick, device_profile, log_dir, res)
        console.print(f"[dim]native under {DEVICE_PROFILE_ENV}={device_profile} done in "
                      f"{time.perf_counter() - t0:.0f} s[/]", highlight=False)
    by_key = {}
    for case in cases:
        for rec in records:
            if record_key(rec, case) == case.key():
                by_key[case.key()] = rec
    for case in cases:
        rec = by_key.get(case.key())
        if rec is None or not rec.get("ok"):
            res.errors.append({"case": case.native_line(),
                               "error": (rec or {}).get("error", "no result (the program stopped before it)")})
    ok = {k: r for k, r in by_key.items() if r.get("ok")}

    # ceilings
    for case in cases:
        rec = ok.get(case.key())
        if rec and isinstance(case, GemmCase):
            if (case.m, case.n, case.k) == (8192, 8192, 8192):
                res.ceilings["peak_tflops"] = rec["tflops"]
            else:
                res.ceilings["verify_gemm_tflops"] = rec["tflops"]
        if rec and isinstance(case, CopyCase):
            res.ceilings["copy_gbps"] = rec["gbps"]
        if rec and isinstance(case, MmaCase):
            res.ceilings["mma_sync_tflops"] = rec["tflops"]
        if rec and isinstance(case, LaunchCase):
            tag = "launch" if case.smem_kb == 0 else "launch_smem"
            res.ceilings[f"{tag}_ms"] = rec["ms"]
            res.ceilings[f"{tag}_graph_ms"] = rec.get("graph_ms")
            if case.smem_kb:
                res.ceilings["launch_smem_kb"] = case.smem_kb

    # baselines, case by case
    python_cache: dict[tuple, float] = {}
    for case in cases:
        rec = ok.get(case.key())
        if rec is None:
            continue
        try:
            if isinstance(case, KimiAttnCase):
                reps = _baseline_reps(case, quick)
                base = baselines.torch_attention(case, reps)
                if anchor is not None:
                    base.update(_anchor_case(anchor, case, reps, facts, res))
                # Triton's own build on wgmma: also the build an sm_120 gets (on mma.sync alone)
                if anchor_no_wgmma is not None and vllm_anchor.uses_wgmma(anchor):
                    timed = _anchor_case(anchor_no_wgmma, case, reps, facts, res, "vLLM anchor without wgmma")
                    base.update({f"vllm_no_wgmma_{k[len('vllm_'):]}": v for k, v in timed.items()})
                row = report.kimi_row(case, rec, base, res.ceilings, profiled.get(case.key()), device_profile)
                res.rows.setdefault("kimi", []).append(row)
                console.print(f"  kimi B={case.batch} T={case.query_tokens:<3} prefix={case.prefix:<7} kdtree "
                              f"{report._us(row['kdtree_ms']):>10}  torch {report._us(row['torch_ms']):>10}  "
                              f"vLLM {report._us(row.get('vllm_ms')):>10}  roofline "
                              f"{report._f(row['of_roofline'], 2)}", highlight=False)
            elif isinstance(case, AttnCase):
                base = baselines.torch_attention(case, _baseline_reps(case, quick))
                row = report.attn_row(case, rec, base, res.ceilings)
                res.rows.setdefault("attn", []).append(row)
                console.print(f"  attn H={case.heads:<3} n={case.n:<4} prefix={case.prefix:<7} kdtree "
                              f"{report._us(row['kdtree_ms']):>10}  torch {report._us(row['torch_ms']):>10}  "
                              f"{report._x(row['vs_torch'])}", highlight=False)
            elif isinstance(case, TopkCase):
                base = baselines.torch_topk(case, _baseline_reps(case, quick))
                row = report.topk_row(case, rec, base, res.ceilings)
                res.rows.setdefault("topk", []).append(row)
                console.print(f"  topk {case.rows}x{case.vocab} K={case.k}: kdtree {report._us(row['kdtree_ms'])}, "
                              f"torch f32 {report._us(row['torch_f32_ms'])} ({report._x(row['vs_torch_f32'])})",
                              highlight=False)
            elif isinstance(case, TreeCase):
                key = (case.budget, case.depth, case.input)
                if key not in python_cache:
                    python_cache[key] = baselines.python_tree_ms_per_tree(case)
                row = report.tree_row(case, rec, {"python_ms_per_tree": python_cache[key]})
                res.rows.setdefault("tree", []).append(row)
                console.print(f"  tree {case.input:6} B={case.batch:<3} N={case.budget:<4} kdtree "
                              f"{report._us(row['kdtree_ms']):>9} (graph {report._us(row['graph_ms'])})  heap "
                              f"{report._us(row['heap_ms'])}  {report._x(row['vs_heap'])}", highlight=False)
            elif isinstance(case, (AcceptCase, CompactCase)):
                res.rows.setdefault("accept", []).append(report.small_row(case, rec))
        except Exception as exc:  # a baseline that fails (memory, a torch error) is reported, not fatal
            res.errors.append({"case": case.native_line(), "error": f"baseline: {type(exc).__name__}: {exc}"})
    res.facts["clocks_end"] = nvml_clocks(0)
    out_dir = out_dir or default_out_dir(facts)
    if anchor is not None:
        try:  # what Triton builds for an sm_120 (and an sm_90), read without one
            res.anchor["offline"] = [vllm_anchor.compile_offline(anchor, cc) for cc in (120, 90)]
        except Exception as exc:  # an argument this vLLM's kernel does not have: said, the run stands
            res.anchor["offline"] = f"{type(exc).__name__}: {exc}"
        res.anchor.update(source=anchor.kdtree_source,
                          **vllm_anchor.instructions(anchor, out_dir / "vllm-triton-mla.asm.txt"))
        if anchor_no_wgmma is not None and vllm_anchor.compiled_kernels(getattr(anchor_no_wgmma,
                                                                               vllm_anchor.STAGE1_KERNEL)):
            res.anchor["no_wgmma"] = {"env": vllm_anchor.NO_WGMMA_ENV, **vllm_anchor.instructions(
                anchor_no_wgmma, out_dir / "vllm-triton-mla-no-wgmma.asm.txt")}
    written = report.write(res, out_dir)
    return res, written
