"""`kdtree build --check-resources`: what ptxas gives each kernel on one architecture
(registers, spill stores and loads, static shared memory), read from `ptxas -v` of a compile
of the kernel sources for that architecture alone, and checked against what the plans may
launch there: a spill, or static shared memory over the device's limit, in a kernel the plans
may select fails.

A kernel the plans never select on an architecture (a tile over its shared memory, wgmma on
sm_120, a variant only a test or a benchmark forces) is listed in NOT_PLANNED with why (the
verify_attn baselines of csrc/dev/ are not compiled into these sources at all); a
spill the plans accept is listed in KNOWN_SPILLS with its bytes and why, and fails when it
grows. Everything else must have no spill at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from python_engine.device_profiles import PROFILES
from python_engine.errors import KdtreeError

from .ninja_file import CXX_STANDARD
from .toolchain import find_cuda, find_cublas, find_cxx

# The sources of the kernels the plans select (verify_attn's tiles and merge, top-K and
# tree_build, tree_accept and the cache compaction, the drafter's attention and merge): what
# CI checks, kept small.
PLANNED_KERNEL_SOURCES = ("kernels/verify_attn_bf16.cu", "kernels/verify_attn_f32.cu", "kernels/topk_logprobs.cu",
                          "kernels/tree_build.cu", "kernels/tree_accept.cu", "kernels/drafter_attn.cu")
# The device profile whose limits an architecture's kernels are held to.
# (sm_90a is not held to it yet: tree_build's two-blocks-a-SM instance spills there by design.)
ARCH_PROFILE = {"120": "rtx-pro-6000"}
MAX_REGISTERS = 255  # a thread's most (every architecture kdtree builds for)

# (architecture, pattern on the demangled name, why the plans never select it there). The
# tiles' names are their templates' (the aliases of verify_attn_bf16.cuh / _decode.cuh / _f32.cuh
# do not survive compilation): each reason names the alias.
NOT_PLANNED: tuple[tuple[str, str, str], ...] = (
    ("120", r"Bf16DecodeConfig<64, 2, [12], \w+, 1>",
     "configs 3 and 11 (Bf16DecodeSm90, Bf16DecodeNarrow): over sm_120's shared memory a block"),
    ("120", r"F32AttnTile<16>",
     "config 2 (F32Attn): 113,488 B, over sm_120's shared memory a block (config 13 is its float32 tile)"),
    ("120", r"verify_attn_seesaw_kernel", "config 10 (Bf16AttnSeesaw): wgmma, sm_90a only"),
    ("120", r"tree_build_kernel<\w+, \w+, 2>",
     "two blocks a SM: never on sm_120, where two blocks' shared memory exceeds an SM's (TreeBuildPlan::lone)"),
    ("120", r"topk_logprobs_kernel<\w+, \d+, false>",
     "the second scan: only when TopkLogprobsParams::variant forces it (A/B timing); the lean scan is the default"),
)
# (architecture, pattern, spill store bytes accepted, why): none at present (the 4-byte-load
# lean top-K's 16 B went with its float64 exp)
KNOWN_SPILLS: tuple[tuple[str, str, int, str], ...] = ()

_ENTRY_RE = re.compile(
    r"Compiling entry function '(?P<name>[^']+)' for '(?P<sm>sm_\w+)'\n(?:(?!Compiling entry).*\n)*?"
    r".*Function properties for (?P=name)\n\s*(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
    r"(?P<loads>\d+) bytes spill loads\n.*Used (?P<regs>\d+) registers(?P<rest>[^\n]*)")
_SMEM_RE = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class KernelResources:
    source: str  # relative to csrc/
    name: str  # demangled
    registers: int
    spill_stores: int
    spill_loads: int
    static_smem: int


@dataclass(frozen=True)
class Verdict:
    kernel: KernelResources
    planned: bool
    problem: str  # "" when fine
    note: str  # why it is not planned, or why its spill is accepted


def parse_ptxas(text: str, source: str) -> list[KernelResources]:
    """Every entry function in `ptxas -v` output (one architecture), names as mangled."""
    out = []
    for m in _ENTRY_RE.finditer(text):
        smem = _SMEM_RE.search(m.group("rest"))
        out.append(KernelResources(source, m.group("name"), int(m.group("regs")), int(m.group("stores")),
                                   int(m.group("loads")), int(smem.group(1)) if smem else 0))
    return out


def short_name(name: str) -> str:
    """A demangled kernel name without its return type, namespaces and parameter list."""
    name = re.sub(r"^void ", "", name).replace("kdtree::kern::", "").replace("kdtree::", "")
    depth = 0
    for i, ch in enumerate(name):  # the parameter list: the first "(" outside template brackets
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            return name[:i]
    return name


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    proc = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, proc.stdout.splitlines()))


def judge(arch: str, k: KernelResources) -> Verdict:
    profile = PROFILES[ARCH_PROFILE[arch]]
    for a, pattern, why in NOT_PLANNED:
        if a == arch and re.search(pattern, k.name):
            return Verdict(k, False, "", why)
    problems = []
    note = ""
    if k.spill_stores or k.spill_loads:
        known = next(((b, why) for a, pattern, b, why in KNOWN_SPILLS if a == arch and re.search(pattern, k.name)), None)
        if known and k.spill_stores <= known[0]:
            note = f"accepted spill ({known[0]} B): {known[1]}"
        else:
            problems.append(f"spills {k.spill_stores} B stored, {k.spill_loads} B loaded")
    if k.static_smem > profile.smem_per_block.value:
        problems.append(f"{k.static_smem} B of static shared memory, over {profile.name}'s "
                        f"{int(profile.smem_per_block.value)} a block")
    if k.registers > MAX_REGISTERS:
        problems.append(f"{k.registers} registers")
    return Verdict(k, True, "; ".join(problems), note)


def ptxas_report(arch: str, sources: tuple[str, ...] = PLANNED_KERNEL_SOURCES, csrc: Path | None = None,
                 cuda_home: str | None = None, jobs: int | None = None) -> list[Verdict]:
    """Compile `sources` (relative to csrc/) for `arch` alone with `ptxas -v` and judge every kernel."""
    from python_engine.project import PROJECT_ROOT

    if arch not in ARCH_PROFILE:
        raise KdtreeError(f"--check-resources knows the architectures {', '.join(ARCH_PROFILE)}, not {arch!r}")
    csrc = csrc or PROJECT_ROOT / "csrc"
    cuda = find_cuda(cuda_home)
    includes = [csrc, *cuda.include_dirs, find_cublas(cuda).include_dir]
    flags = [CXX_STANDARD, "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-ccbin", find_cxx(),
             *(f"-I{d}" for d in dict.fromkeys(includes)), f"-gencode=arch=compute_{arch},code=sm_{arch}",
             "-Xptxas", "-v", "-cubin"]

    def compile_one(source: str) -> list[KernelResources]:
        with tempfile.TemporaryDirectory(prefix="kdtree-ptxas-") as tmp:
            proc = subprocess.run([str(cuda.nvcc), *flags, "-o", str(Path(tmp) / "out.cubin"), str(csrc / source)],
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            raise KdtreeError(f"nvcc for sm_{arch} failed on csrc/{source}:\n{proc.stderr[-3000:]}")
        return parse_ptxas(proc.stderr, source)

    with ThreadPoolExecutor(max_workers=jobs or max(1, len(os.sched_getaffinity(0)))) as pool:
        kernels = [k for found in pool.map(compile_one, sources) for k in found]
    names = demangle([k.name for k in kernels])
    return [judge(arch, KernelResources(k.source, names[k.name], k.registers, k.spill_stores, k.spill_loads,
                                        k.static_smem)) for k in kernels]
