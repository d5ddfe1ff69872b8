"""`kdtree bench kernels --phase-clocks`: where a kernel's cycles go, phase by phase. bench_kernels
is built with every kernel's phase clocks (the csrc/dev/ headers under their -D flags) in a build
root of its own, so the library in build/ stays the product, then runs each case alone (a
kernel's clocks print from the GPU every 20 or 40 of its launches, interleaved with no other
kernel's). phase-clocks.json and .md hold the clock lines of each case with the run's command,
commit, device and date; phase-clocks/<case>.log each case's whole output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .native import run_native
from .provenance import run_record
from .suites import AttnCase, Case, TopkCase, TreeCase

PHASE_CLOCK_FLAGS = ("-DKD_ATTN_PHASE_CLOCKS", "-DKD_TOPK_PHASE_CLOCKS", "-DKD_TREE_PHASE_CLOCKS")
BUILD_SUFFIX = "phase-clocks"  # build -> build-phase-clocks
CLOCK_LINE_PREFIXES = ("attn_clk", "topk_clk", "tree_clk")  # what the csrc/dev/*_clocks.cuh printf
# The shapes whose phases the kernel notes discuss: verify_attn at Kimi's 64 heads (a tree of 64
# and plain decode) and one rank's 8, the top-K of 448 rows over Kimi's vocabulary, tree_build
# alone and at batch 64.
PHASE_CLOCK_CASES: tuple[Case, ...] = (
    AttnCase(heads=64, n=64, prefix=32768), AttnCase(heads=64, n=1, prefix=32768), AttnCase(heads=8, n=1, prefix=32768),
    TopkCase(rows=448, vocab=163840, k=256), TreeCase(batch=1, budget=256), TreeCase(batch=64, budget=256),
)
CASE_TIMEOUT_S = 120.0


def clock_lines(text: str) -> list[str]:
    """The lines the phase clocks printed."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith(CLOCK_LINE_PREFIXES)]


def case_file_name(case: Case) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", case.native_line()).strip("_")


def run_phase_clocks(out_dir: Path, arch: str | None, console,
                     cases: tuple[Case, ...] = PHASE_CLOCK_CASES) -> tuple[Path, Path]:
    """Build, run each case, write phase-clocks.json and .md into out_dir; returns their paths.
    The caller checks for a GPU first."""
    from kdtree_cli.native_build.driver import BuildRequest
    from kdtree_cli.native_build.flagged_build import build_with_nvcc_flags

    request = BuildRequest(arch=arch, targets=("bench_kernels",))
    program = build_with_nvcc_flags(request, PHASE_CLOCK_FLAGS, BUILD_SUFFIX, console) / "bin" / "bench_kernels"
    log_dir = out_dir / "phase-clocks"
    log_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases:
        log = log_dir / f"{case_file_name(case)}.log"
        console.print(f"[dim]phase clocks: {case.native_line()}[/]", highlight=False)
        records = run_native(program, [case], quick=False, timeout_s=CASE_TIMEOUT_S, log=log)
        lines = clock_lines(log.read_text(errors="replace"))
        error = next((r.get("error") for r in records if not r.get("ok", True)), None)
        rows.append({"case": case.native_line(), "clock_lines": lines, "log": str(log.relative_to(out_dir)),
                     "error": error or (None if lines else "no clock line printed")})
    record = {"run": run_record(), "flags": list(PHASE_CLOCK_FLAGS), "cases": rows}
    json_path, md_path = out_dir / "phase-clocks.json", out_dir / "phase-clocks.md"
    json_path.write_text(json.dumps(record, indent=2) + "\n")
    md = ["# Phase clocks (bench_kernels built with " + " ".join(PHASE_CLOCK_FLAGS) + ")", "",
          *(f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in record["run"].items()),
          "", "What each phase is: the header that prints it, csrc/dev/*_clocks.cuh.", ""]
    for row in rows:
        md += [f"## {row['case']}", ""]
        md += [f"error: {row['error']}", ""] if row["error"] else []
        md += ["```", *row["clock_lines"], "```", ""] if row["clock_lines"] else []
    md_path.write_text("\n".join(md))
    return json_path, md_path
