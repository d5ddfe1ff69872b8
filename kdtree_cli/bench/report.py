"""Rows of a bench run: each kernel's time next to its baselines and ceilings, the ratios,
and the kernels' goals; written as JSON, a Markdown table and PNG plots."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .baselines import KEY_PAD, best_torch_form

# The kernels' goals: (label, suite, match on the row, column, comparison, target)
GOALS = [
    ("verify_attn bf16 H=64 n=64 prefix=32k: <= 0.55 ms", "attn", {"heads": 64, "n": 64, "prefix": 32768},
     "kdtree_ms", "<=", 0.55),
    ("  ... and >= 3x torch's two-GEMM form", "attn", {"heads": 64, "n": 64, "prefix": 32768}, "vs_torch", ">=", 3.0),
    ("verify_attn bf16 H=64 n=64 prefix=128k: >= 3x torch", "attn", {"heads": 64, "n": 64, "prefix": 131072},
     "vs_torch", ">=", 3.0),
    ("verify_attn bf16 H=8 n=64 prefix=32k: >= 3x torch", "attn", {"heads": 8, "n": 64, "prefix": 32768},
     "vs_torch", ">=", 3.0),
    ("verify_attn bf16 H=64 n=1 prefix=32k: <= 15 us", "attn", {"heads": 64, "n": 1, "prefix": 32768}, "kdtree_ms",
     "<=", 0.015),
    ("topk_logprobs 448 x 163840, K=256: <= 0.2 ms", "topk", {"rows": 448, "vocab": 163840, "k": 256}, "kdtree_ms",
     "<=", 0.2),
    ("  ... and >= 6x torch top-K + log-softmax (f32)", "topk", {"rows": 448, "vocab": 163840, "k": 256},
     "vs_torch_f32", ">=", 6.0),
    ("tree_build B=64 N=256 D=15 (flat): <= 20 us", "tree", {"batch": 64, "budget": 256, "input": "flat"},
     "kdtree_ms", "<=", 0.020),
    ("tree_build B=1 N=256 D=15 (flat): <= 8 us", "tree", {"batch": 1, "budget": 256, "input": "flat"}, "kdtree_ms",
     "<=", 0.008),
]


# The kimi-rank goals (BenchResult.kimi_goals): the sm_120 plan against vLLM's kernel and
# against the sm_90a plan where both only stream the cache
KIMI_VS_VLLM = 1.5
KIMI_PROFILE_OVER_PLAIN = 1.5
KIMI_MEMORY_BOUND_TOKENS = 2


@dataclass
class BenchResult:
    facts: dict
    ceilings: dict = field(default_factory=dict)  # peak_tflops, copy_gbps, gemm rows
    rows: dict = field(default_factory=dict)      # suite -> list of row dicts
    errors: list = field(default_factory=list)    # cases that failed, with their message
    run: dict = field(default_factory=dict)       # command, commit, device, date (provenance.run_record)
    anchor: dict = field(default_factory=dict)    # the vLLM anchor: its source and the instructions it ran

    def goals(self) -> list[dict]:
        out = []
        for label, suite, match, col, op, target in GOALS:
            row = next((r for r in self.rows.get(suite, []) if all(r.get(k) == v for k, v in match.items())), None)
            value = None if row is None else row.get(col)
            met = None if value is None else (value <= target if op == "<=" else value >= target)
            out.append({"goal": label, "value": value, "target": target, "op": op, "met": met, "column": col})
        return out

    def kimi_goals(self) -> list[dict]:
        """The kimi-rank rows' goals, each over every row it covers: the device profile's time
        >= KIMI_VS_VLLM x faster than vLLM's kernel (each build of it), and within
        KIMI_PROFILE_OVER_PLAIN of the plain run where the rows are memory-bound (T <= 2).
        Only the goals whose columns this run measured."""
        rows = self.rows.get("kimi") or []
        profile = self.facts.get("device_profile") or "kdtree"
        out = []

        def goal(label, column, values, op, target):
            values = [v for v in values if v is not None]
            if values:
                worst = min(values) if op == ">=" else max(values)
                out.append({"goal": label, "column": column, "rows": len(values), "worst": worst, "op": op,
                            "target": target, "met": worst >= target if op == ">=" else worst <= target})

        time_col = "profile" if self.facts.get("device_profile") else "kdtree"
        for vllm, name in (("vllm", "vLLM's Triton MLA decode"), ("vllm_no_wgmma", "vLLM's, built without wgmma")):
            col = f"profile_vs_{vllm}" if time_col == "profile" else f"vs_{vllm}"
            goal(f"{profile} >= {KIMI_VS_VLLM}x {name} at every kimi-rank row", col, [r.get(col) for r in rows],
                 ">=", KIMI_VS_VLLM)
        goal(f"{profile} within {KIMI_PROFILE_OVER_PLAIN}x of the plain run at T <= {KIMI_MEMORY_BOUND_TOKENS}",
             "profile_over_plain", [r.get("profile_over_plain") for r in rows
                                    if r["query_tokens"] <= KIMI_MEMORY_BOUND_TOKENS], "<=", KIMI_PROFILE_OVER_PLAIN)
        return out

    def to_json(self) -> str:
        return json.dumps({"run": self.run, "facts": self.facts, "ceilings": self.ceilings, "rows": self.rows,
                           "goals": self.goals(), "kimi_goals": self.kimi_goals(), "errors": self.errors,
                           "anchor": self.anchor}, indent=1)


def _ratio(a, b):
    return None if not a or not b else a / b


def attn_row(case, native: dict, base: dict, ceil: dict) -> dict:
    """One attention row. torch_ms / cublas_ms are the faster of the unpadded and the padded
    forms (baselines.torch_attention), torch_form / cublas_form say which; the roofline
    (floor_mma_ms: FLOPs at the measured mma.sync rate, floor_memory_ms: the cache at copy
    bandwidth) is there when the run measured those ceilings."""
    ms = native.get("ms")
    floor_compute = case.flops / (ceil["peak_tflops"] * 1e9) if ceil.get("peak_tflops") else None
    floor_memory = case.cache_bytes / (ceil["copy_gbps"] * 1e6) if ceil.get("copy_gbps") else None
    floor_mma = case.flops / (ceil["mma_sync_tflops"] * 1e9) if ceil.get("mma_sync_tflops") else None
    floor = max(x for x in (floor_compute, floor_memory) if x is not None) if (floor_compute or floor_memory) else None
    roof = max(x for x in (floor_mma, floor_memory) if x is not None) if (floor_mma or floor_memory) else None
    torch_ms, torch_form = best_torch_form(base, "torch_ms", "torch_padded_ms")
    cublas_ms, cublas_form = best_torch_form(base, "cublas_ms", "cublas_padded_ms")
    return {
        "heads": case.heads, "n": case.n, "prefix": case.prefix, "batch": case.batch, "dtype": case.dtype,
        "kdtree_ms": ms, "tflops": native.get("tflops"), "cache_gbps": native.get("cache_gbps"),
        "plan": _plan(native),
        "torch_ms": torch_ms, "torch_form": torch_form, "cublas_ms": cublas_ms, "cublas_form": cublas_form,
        "torch_unpadded_ms": base.get("torch_ms"), "torch_padded_ms": base.get("torch_padded_ms"),
        "cublas_unpadded_ms": base.get("cublas_ms"), "cublas_padded_ms": base.get("cublas_padded_ms"),
        "floor_ms": floor, "floor_bound": "memory" if floor is not None and floor == floor_memory else "compute",
        "floor_memory_ms": floor_memory, "floor_mma_ms": floor_mma,
        "roofline_ms": roof, "roofline_bound": "memory" if roof is not None and roof == floor_memory else "mma",
        "vs_torch": _ratio(torch_ms, ms), "vs_cublas": _ratio(cublas_ms, ms),
        "of_floor": _ratio(floor, ms), "of_roofline": _ratio(roof, ms),
    }


def _plan(native: dict) -> str:
    return (f"{native.get('splits')} splits x {native.get('split_keys')} keys"
            + (" in pairs" if (native.get("split_group") or 1) > 1 else "") + f", config {native.get('config')}")


def kimi_row(case, native: dict, base: dict, ceil: dict, profiled: dict | None = None,
             profile: str | None = None) -> dict:
    """A kimi-rank row: the attention row with the query tokens; when the vLLM anchor ran, its
    time, split count, error against our float32 reference, and the ratio; when the case also
    ran under a device profile, that time and plan, its ratio to vLLM and to the plain run."""
    row = attn_row(case, native, base, ceil)
    row["query_tokens"] = case.n + 1
    for key in ("vllm_ms", "vllm_splits", "vllm_page_size", "vllm_rel_err", "vllm_no_wgmma_ms", "vllm_no_wgmma_rel_err"):
        row[key] = base.get(key)
    row["vs_vllm"] = _ratio(base.get("vllm_ms"), row["kdtree_ms"])
    row["vs_vllm_no_wgmma"] = _ratio(base.get("vllm_no_wgmma_ms"), row["kdtree_ms"])
    profiled = profiled or {}
    row.update(profile=profile, profile_ms=profiled.get("ms"), profile_plan=_plan(profiled) if profiled else None,
               profile_vs_vllm=_ratio(base.get("vllm_ms"), profiled.get("ms")),
               profile_vs_vllm_no_wgmma=_ratio(base.get("vllm_no_wgmma_ms"), profiled.get("ms")),
               profile_over_plain=_ratio(profiled.get("ms"), row["kdtree_ms"]))
    return row


def topk_row(case, native: dict, base: dict, ceil: dict) -> dict:
    ms = native.get("ms")
    floor = 4.0 * case.rows * case.vocab / (ceil["copy_gbps"] * 1e6) if ceil.get("copy_gbps") else None
    return {
        "rows": case.rows, "vocab": case.vocab, "k": case.k, "kdtree_ms": ms, "logits_gbps": native.get("logits_gbps"),
        "torch_f32_ms": base.get("torch_f32_ms"), "torch_f64_ms": base.get("torch_f64_ms"), "floor_ms": floor,
        "vs_torch_f32": _ratio(base.get("torch_f32_ms"), ms), "vs_torch_f64": _ratio(base.get("torch_f64_ms"), ms),
        "of_floor": _ratio(floor, ms),
    }


def tree_row(case, native: dict, base: dict) -> dict:
    ms = native.get("ms")
    python_ms = base.get("python_ms_per_tree")
    return {
        "batch": case.batch, "budget": case.budget, "depth": case.depth, "input": case.input,
        "kdtree_ms": ms, "graph_ms": native.get("graph_ms"), "heap_ms": native.get("heap_ms"),
        "heap_ms_per_tree": native.get("heap_ms_per_tree"),
        "python_ms": None if python_ms is None else python_ms * case.batch,
        "vs_heap": _ratio(native.get("heap_ms"), ms),
        "vs_python": None if python_ms is None else _ratio(python_ms * case.batch, ms),
        "max_tree_depth": native.get("max_tree_depth"),
        "trees_differing_from_heap": native.get("trees_differing_from_heap"),
    }


def small_row(case, native: dict) -> dict:
    return {"kernel": case.suite, **case.params(), "kdtree_ms": native.get("ms"), "graph_ms": native.get("graph_ms"),
            "gbps": native.get("gbps")}


# ---- Markdown -------------------------------------------------------------------------------------

def kimi_lines(res: BenchResult) -> list[str]:
    """The kimi-rank table: each row beside its roofline (the cache at copy bandwidth, the FLOPs
    at this run's mma.sync rate), torch's best form and, when it ran, vLLM's Triton MLA decode."""
    c, a = res.ceilings, res.anchor
    lines = ["## Kimi K2.6 per rank (8 heads; T query tokens = tree nodes + 1)", "",
             f"roofline = max(cache bytes / copy bandwidth {_f(c.get('copy_gbps'))} GB/s, FLOPs / mma.sync rate "
             f"{_f(c.get('mma_sync_tflops'))} TFLOP/s), both measured in this run; of roofline = roofline / kdtree.",
             ""]
    if a:
        lines += [f"vLLM: Triton MLA decode (`decode_attention_fwd`, {a.get('source')}), each verify token a "
                  "decode row reading the prefix and the chain up to itself, its own tiles, vLLM's split rule; "
                  f"{a.get('kernel')}: {_variants(a)}. err = max |vLLM - float32 reference| / max |reference|.", ""]
        offline = a.get("offline")
        if isinstance(offline, list):
            lines += ["Compiled by Triton without running (its MLA tiles, 64 splits): " + "; ".join(
                f"sm_{o['cc']}: PTX wgmma {o['ptx_wgmma']}, mma.sync {o['ptx_mma_sync']}, SASS HGMMA {o['sass_hgmma']}, "
                f"HMMA {o['sass_hmma']}, {o['shared_bytes']} B shared" for o in offline)
                + f" (triton {offline[0].get('triton')}).", ""]
        elif offline:
            lines += [f"Compiled by Triton without running: failed ({offline}).", ""]
        if a.get("no_wgmma"):
            env = " ".join(f"{k}={v}" for k, v in a["no_wgmma"].get("env", {}).items())
            lines += [f"vLLM no wgmma: the same kernel compiled with {env} (tl.dot on mma.sync, as for an sm_120): "
                      f"{_variants(a['no_wgmma'])}.", ""]
    profile = res.facts.get("device_profile")
    if profile:
        lines += [f"{profile}: the same cases run again under KDTREE_DEVICE_PROFILE={profile} (that device's plans "
                  f"and limits on this GPU's silicon: not its bandwidth or clocks); / plain = {profile} time over "
                  "the plain run's.", ""]
    no_wgmma = any(r.get("vllm_no_wgmma_ms") is not None for r in res.rows["kimi"])
    extra = ["vLLM no wgmma", "vs it"] if no_wgmma else []
    extra += [] if not profile else [profile, f"{profile} vs vLLM"] + ([f"{profile} vs vLLM no wgmma"] if no_wgmma
                                                                        else []) + [f"{profile} / plain",
                                                                                    f"{profile} plan"]
    head = ["B", "T", "prefix", "kdtree", "roofline", "of roofline", "torch 2-GEMM", "vs torch", "vLLM", "vs vLLM",
            "vLLM splits", "vLLM err", "plan"] + extra
    goals = res.kimi_goals()
    if goals:
        lines += ["| goal | rows | worst | met |", "|---|---|---|---|"]
        lines += [f"| {g['goal']} | {g['rows']} | {_f(g['worst'], 3)} | {'yes' if g['met'] else 'NO'} |" for g in goals]
        lines.append("")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res.rows["kimi"]:
        cells = [r["batch"], r["query_tokens"], r["prefix"], _us(r["kdtree_ms"]),
                 f"{_us(r['roofline_ms'])} ({r['roofline_bound']})", _f(r["of_roofline"], 2),
                 f"{_us(r['torch_ms'])}{_form(r.get('torch_form'))}", _x(r["vs_torch"]), _us(r.get("vllm_ms")),
                 _x(r.get("vs_vllm")), _f(r.get("vllm_splits")), _f(r.get("vllm_rel_err"), 2), r["plan"]]
        if no_wgmma:
            cells += [_us(r.get("vllm_no_wgmma_ms")), _x(r.get("vs_vllm_no_wgmma"))]
        if profile:
            cells += [_us(r.get("profile_ms")), _x(r.get("profile_vs_vllm"))]
            cells += [_x(r.get("profile_vs_vllm_no_wgmma"))] if no_wgmma else []
            cells += [_f(r.get("profile_over_plain"), 3), r.get("profile_plan") or "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    return lines


def _variants(instr: dict) -> str:
    """The MMA instructions of each compiled variant of vLLM's kernel, in words."""
    return ("; ".join(f"variant {v['variant']}: PTX wgmma {v['ptx_wgmma']}, mma.sync {v['ptx_mma_sync']}, "
                      f"SASS HGMMA {v['sass_hgmma']}, HMMA {v['sass_hmma']} ({v['num_warps']} warps, "
                      f"{v['num_stages']} stages, {v.get('shared_bytes')} B shared)"
                      for v in instr.get("variants") or []) or "no compiled kernel found")


def _f(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _us(ms):
    return "-" if ms is None else (f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms")


def _x(r):
    return "-" if r is None else f"{r:.2f}x"


def _form(form):
    return "" if not form else f" ({form})"


def markdown(res: BenchResult) -> str:
    f = res.facts
    clk = f.get("clocks_start", {})
    lines = [
        f"# kdtree kernels on {f.get('device')} ({f.get('date')})", "",
        f"commit {f.get('commit')}; torch {f.get('torch')} (CUDA {f.get('torch_cuda')}); "
        f"SM clock {clk.get('sm_clock_mhz', '?')} / {clk.get('sm_clock_max_mhz', '?')} MHz, "
        f"memory {clk.get('mem_clock_mhz', '?')} MHz, driver {clk.get('driver', '?')}, {f.get('sms')} SMs", "",
        "Every time is a median of CUDA-event-timed runs after warm-up, each queued behind a spin kernel so that "
        "the GPU time is timed, not the host's launches; the baselines ran in the same "
        "process on the same GPU. Ratios > 1 mean kdtree is faster.", "",
        "## Goals", "", "| goal | measured | met |", "|---|---|---|",
    ]
    for g in res.goals():
        v = g["value"]
        shown = "-" if v is None else (_x(v) if g["column"].startswith("vs_") else _us(v))
        lines.append(f"| {g['goal']} | {shown} | {'-' if g['met'] is None else ('yes' if g['met'] else 'NO')} |")
    c = res.ceilings
    lines += ["", "## Ceilings", "",
              f"- cuBLAS bf16 GEMM 8192^3: {_f(c.get('peak_tflops'))} TFLOP/s; at the verify shape "
              f"4160x32768x576: {_f(c.get('verify_gemm_tflops'))} TFLOP/s",
              f"- device copy: {_f(c.get('copy_gbps'))} GB/s (bytes read + written)"]
    if c.get("mma_sync_tflops") is not None:
        lines.append(f"- mma.sync bf16 m16n8k16 (f32 accumulate, register operands, every SM): "
                     f"{_f(c['mma_sync_tflops'])} TFLOP/s")
    if c.get("launch_ms") is not None:
        smem = (f"; {_us(c['launch_smem_ms'])} with {c.get('launch_smem_kb')} KB of shared memory a block"
                if c.get("launch_smem_ms") is not None else "")
        lines.append(f"- one launch (an empty kernel, a block a SM, timed as every case is): {_us(c['launch_ms'])}{smem}; "
                     f"{_us(c.get('launch_graph_ms'))} a launch in a CUDA graph of 20: no kernel below is faster")
    lines.append("")
    if res.rows.get("attn"):
        lines += ["## verify_attn (bf16, B=1)", "",
                  "floor = max(FLOPs / GEMM peak, cache bytes / copy bandwidth)", "",
                  "torch 2-GEMM and cuBLAS GEMMs: the faster of the keys as they are and padded to a multiple of "
                  f"{KEY_PAD} (masked), the form that won beside each", "",
                  "| H | n | prefix | kdtree | TFLOP/s | cache GB/s | torch 2-GEMM | cuBLAS GEMMs | floor | vs torch | "
                  "of floor | plan |", "|" + "---|" * 12]
        for r in res.rows["attn"]:
            lines.append(f"| {r['heads']} | {r['n']} | {r['prefix']} | {_us(r['kdtree_ms'])} | {_f(r['tflops'])} | "
                         f"{_f(r['cache_gbps'])} | {_us(r['torch_ms'])}{_form(r.get('torch_form'))} | "
                         f"{_us(r['cublas_ms'])}{_form(r.get('cublas_form'))} | {_us(r['floor_ms'])} "
                         f"({r['floor_bound']}) | {_x(r['vs_torch'])} | {_f(r['of_floor'], 2)} | {r['plan']} |")
        lines.append("")
    if res.rows.get("kimi"):
        lines += kimi_lines(res)
    if res.rows.get("topk"):
        lines += ["## topk_logprobs", "", "floor = one read of the logits at copy bandwidth", "",
                  "| rows | V | K | kdtree | GB/s | torch f32 | torch f64 | floor | vs torch f32 | vs f64 | of floor |",
                  "|" + "---|" * 11]
        for r in res.rows["topk"]:
            lines.append(f"| {r['rows']} | {r['vocab']} | {r['k']} | {_us(r['kdtree_ms'])} | {_f(r['logits_gbps'])} | "
                         f"{_us(r['torch_f32_ms'])} | {_us(r['torch_f64_ms'])} | {_us(r['floor_ms'])} | "
                         f"{_x(r['vs_torch_f32'])} | {_x(r['vs_torch_f64'])} | {_f(r['of_floor'], 2)} |")
        lines.append("")
    if res.rows.get("tree"):
        lines += ["## tree_build (D=15, K=N)", "",
                  "kdtree: one launch timed alone (its GPU time, the host launch cost not included); in graph: per launch inside a CUDA "
                  "graph of 20. heap: the reference heap in C++, the B trees one after another on one core; "
                  "python: python_engine.ddtree.build_tree, per tree x B.", "",
                  "| input | B | N | kdtree | in graph | C++ heap | python | vs heap | depth | trees != heap |",
                  "|" + "---|" * 10]
        for r in res.rows["tree"]:
            lines.append(f"| {r['input']} | {r['batch']} | {r['budget']} | {_us(r['kdtree_ms'])} | {_us(r['graph_ms'])} | "
                         f"{_us(r['heap_ms'])} | {_us(r['python_ms'])} | {_x(r['vs_heap'])} | {r['max_tree_depth']} | "
                         f"{r['trees_differing_from_heap']} |")
        lines.append("")
    if res.rows.get("accept"):
        lines += ["## tree_accept, cache_compact", "", "| kernel | B | kdtree | in graph | GB/s |", "|---|---|---|---|---|"]
        for r in res.rows["accept"]:
            lines.append(f"| {r['kernel']} | {r['batch']} | {_us(r['kdtree_ms'])} | {_us(r['graph_ms'])} | {_f(r['gbps'])} |")
        lines.append("")
    if res.errors:
        lines += ["## Cases that failed", ""] + [f"- `{e['case']}`: {e['error']}" for e in res.errors] + [""]
    return "\n".join(lines)


# ---- plots ------------------------------------------------------------------------------------------

def plot(res: BenchResult, out_dir: Path) -> list[Path]:
    """attention.png and tree_topk.png; [] when matplotlib is missing or nothing to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    attn = res.rows.get("attn") or []
    if attn:
        heads = sorted({r["heads"] for r in attn})
        ns = sorted({r["n"] for r in attn})
        fig, axes = plt.subplots(len(heads), len(ns), figsize=(4 * len(ns), 3.4 * len(heads)), squeeze=False)
        for i, h in enumerate(heads):
            for j, n in enumerate(ns):
                ax = axes[i][j]
                rows = sorted((r for r in attn if r["heads"] == h and r["n"] == n), key=lambda r: r["prefix"])
                x = [r["prefix"] for r in rows]
                for col, label, style in (("kdtree_ms", "kdtree", "o-"), ("torch_ms", "torch 2-GEMM", "s--"),
                                          ("cublas_ms", "cuBLAS GEMMs only", "^:"), ("floor_ms", "floor", "k-")):
                    pts = [(a, r[col]) for a, r in zip(x, rows) if r.get(col)]
                    if pts:
                        ax.plot(*zip(*pts), style, label=label, linewidth=1.2 if col != "floor_ms" else 0.8)
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_title(f"H={h}, n={n}", fontsize=10)
                ax.set_xlabel("prefix (keys)")
                ax.set_ylabel("ms")
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"verify_attn bf16 on {res.facts.get('device')}")
        fig.tight_layout()
        path = out_dir / "attention.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    tree, topk = res.rows.get("tree") or [], res.rows.get("topk") or []
    if tree or topk:
        inputs = sorted({r["input"] for r in tree})
        cols = len(inputs) + (1 if topk else 0)
        fig, axes = plt.subplots(1, cols, figsize=(5 * cols, 3.8), squeeze=False)
        for j, inp in enumerate(inputs):
            ax = axes[0][j]
            for b in sorted({r["batch"] for r in tree}):
                rows = sorted((r for r in tree if r["input"] == inp and r["batch"] == b), key=lambda r: r["budget"])
                x = [r["budget"] for r in rows]
                line, = ax.plot(x, [r["kdtree_ms"] * 1e3 for r in rows], "o-", label=f"kdtree B={b}")
                heap = [(a, r["heap_ms"] * 1e3) for a, r in zip(x, rows) if r.get("heap_ms")]
                if heap:
                    ax.plot(*zip(*heap), "x:", color=line.get_color(), label=f"C++ heap B={b}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("budget N")
            ax.set_ylabel("us")
            ax.set_title(f"tree_build, input {inp}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
        if topk:
            ax = axes[0][-1]
            labels = [f"{r['rows']}x{r['vocab']}\nK={r['k']}" for r in topk]
            width = 0.2
            for k, (col, label) in enumerate((("kdtree_ms", "kdtree"), ("torch_f32_ms", "torch f32"),
                                              ("torch_f64_ms", "torch f64"), ("floor_ms", "floor"))):
                ax.bar([i + k * width for i in range(len(topk))], [r.get(col) or 0 for r in topk], width, label=label)
            ax.set_xticks([i + 1.5 * width for i in range(len(topk))], labels, fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("ms")
            ax.set_title("top-K + log-softmax", fontsize=10)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / "tree_topk.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write(res: BenchResult, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(res.to_json())
    (out_dir / "bench.md").write_text(markdown(res))
    return [out_dir / "bench.json", out_dir / "bench.md"] + plot(res, out_dir)
