"""Rows of a bench run: each kernel's time next to its baselines and ceilings, the ratios,
and the kernels' goals; written as JSON, a Markdown table and PNG plots."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass
class BenchResult:
    facts: dict
    ceilings: dict = field(default_factory=dict)  # peak_tflops, copy_gbps, gemm rows
    rows: dict = field(default_factory=dict)      # suite -> list of row dicts
    errors: list = field(default_factory=list)    # cases that failed, with their message
    run: dict = field(default_factory=dict)       # command, commit, device, date (provenance.run_record)

    def goals(self) -> list[dict]:
        out = []
        for label, suite, match, col, op, target in GOALS:
            row = next((r for r in self.rows.get(suite, []) if all(r.get(k) == v for k, v in match.items())), None)
            value = None if row is None else row.get(col)
            met = None if value is None else (value <= target if op == "<=" else value >= target)
            out.append({"goal": label, "value": value, "target": target, "op": op, "met": met, "column": col})
        return out

    def to_json(self) -> str:
        return json.dumps({"run": self.run, "facts": self.facts, "ceilings": self.ceilings, "rows": self.rows,
                           "goals": self.goals(), "errors": self.errors}, indent=1)


def _ratio(a, b):
    return None if not a or not b else a / b


def attn_row(case, native: dict, base: dict, ceil: dict) -> dict:
    ms = native.get("ms")
    floor_compute = case.flops / (ceil["peak_tflops"] * 1e9) if ceil.get("peak_tflops") else None
    floor_memory = case.cache_bytes / (ceil["copy_gbps"] * 1e6) if ceil.get("copy_gbps") else None
    floor = max(x for x in (floor_compute, floor_memory) if x is not None) if (floor_compute or floor_memory) else None
    return {
        "heads": case.heads, "n": case.n, "prefix": case.prefix, "batch": case.batch, "dtype": case.dtype,
        "kdtree_ms": ms, "tflops": native.get("tflops"), "cache_gbps": native.get("cache_gbps"),
        "plan": f"{native.get('splits')} splits x {native.get('split_keys')} keys"
                + (" in pairs" if (native.get("split_group") or 1) > 1 else "") + f", config {native.get('config')}",
        "torch_ms": base.get("torch_ms"), "cublas_ms": base.get("cublas_ms"),
        "floor_ms": floor, "floor_bound": "memory" if floor is not None and floor == floor_memory else "compute",
        "vs_torch": _ratio(base.get("torch_ms"), ms), "vs_cublas": _ratio(base.get("cublas_ms"), ms),
        "of_floor": _ratio(floor, ms),
    }


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
    if c.get("launch_ms") is not None:
        smem = (f"; {_us(c['launch_smem_ms'])} with {c.get('launch_smem_kb')} KB of shared memory a block"
                if c.get("launch_smem_ms") is not None else "")
        lines.append(f"- one launch (an empty kernel, a block a SM, timed as every case is): {_us(c['launch_ms'])}{smem}; "
                     f"{_us(c.get('launch_graph_ms'))} a launch in a CUDA graph of 20: no kernel below is faster")
    lines.append("")
    if res.rows.get("attn"):
        lines += ["## verify_attn (bf16, B=1)", "",
                  "floor = max(FLOPs / GEMM peak, cache bytes / copy bandwidth)", "",
                  "| H | n | prefix | kdtree | TFLOP/s | cache GB/s | torch 2-GEMM | cuBLAS GEMMs | floor | vs torch | "
                  "of floor | plan |", "|" + "---|" * 12]
        for r in res.rows["attn"]:
            lines.append(f"| {r['heads']} | {r['n']} | {r['prefix']} | {_us(r['kdtree_ms'])} | {_f(r['tflops'])} | "
                         f"{_f(r['cache_gbps'])} | {_us(r['torch_ms'])} | {_us(r['cublas_ms'])} | {_us(r['floor_ms'])} "
                         f"({r['floor_bound']}) | {_x(r['vs_torch'])} | {_f(r['of_floor'], 2)} | {r['plan']} |")
        lines.append("")
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
