"""No float64 instruction in the kernels that work per logit, in an sm_120 build: the RTX PRO
6000 (GB202) runs float64 at 1/64 of the float32 rate, so one per logit would set their speed.
topk_logprobs forms its lse in float pairs (csrc/kernels/float_pair.cuh); choose_tokens, the
vocabulary-split argmax and top-K merge use float32 only. Each source is compiled for sm_120
alone with the release build's flags, disassembled (nvdisasm: the nvidia-cuda-nvdisasm wheel
of the `test` extra, or the toolkit's), and every kernel in it is read."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from python_engine.project import PROJECT_ROOT

# the launchers' translation units of the per-logit kernels (each builds only its own kernels)
PER_LOGIT_SOURCES = ("kernels/topk_logprobs.cu", "kernels/sampling.cu", "kernels/vocab_merge.cu")
ARCH = "120"

# SASS opcodes that run on the float64 units: arithmetic, compares, min/max, the float64
# reciprocal / rsqrt seeds, and conversions to or from float64
FP64_OPCODE = re.compile(r"^(D(ADD|MUL|FMA|SETP|SET|MNMX|MMA)\b|MUFU\.\w+64H|(F2F|I2F|F2I|FRND)\.\S*F64)")
_SECTION = re.compile(r"^\.text\.(\S+):")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)")


def kernel_opcodes(sass: str) -> dict[str, list[str]]:
    """Each kernel's opcodes in nvdisasm output (its `.text.<mangled name>:` sections)."""
    kernels: dict[str, list[str]] = {}
    current = None
    for line in sass.splitlines():
        if m := _SECTION.match(line):
            current = kernels.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTRUCTION.search(line)):
            current.append(m.group(1))
    return kernels


def fp64_opcodes(opcodes: list[str]) -> list[str]:
    return [op for op in opcodes if FP64_OPCODE.match(op)]


SASS = """.text._Z3oldPf:
        /*0000*/                   LDC R1, c[0x0][0x37c] ;
        /*0010*/                   F2F.F64.F32 R4, R2 ;
        /*0020*/                   DFMA R4, R4, R6, R8 ;
        /*0030*/              @!P0 DSETP.GT.AND P1, PT, R4, RZ, PT ;
        /*0040*/                   MUFU.RCP64H R5, R7 ;
.text._Z3newPf:
        /*0000*/                   FFMA R4, R2, R3, R4 ;
        /*0010*/                   F2I.FLOOR.NTZ R5, R4 ;
        /*0020*/                   MUFU.EX2 R6, R4 ;
        /*0030*/                   DEPBAR.LE SB0, 0x0 ;
        /*0040*/                   EXIT ;
"""


def test_the_reader_finds_float64_instructions_and_only_those():
    kernels = kernel_opcodes(SASS)
    assert list(kernels) == ["_Z3oldPf", "_Z3newPf"]
    assert fp64_opcodes(kernels["_Z3oldPf"]) == ["F2F.F64.F32", "DFMA", "DSETP.GT.AND", "MUFU.RCP64H"]
    assert fp64_opcodes(kernels["_Z3newPf"]) == []


def _nvdisasm(cuda_home: Path) -> str:
    found = shutil.which("nvdisasm", path=str(cuda_home / "bin"))
    if found:
        return found
    import nvidia  # the nvidia-cuda-nvdisasm wheel (namespace package of the nvidia-* wheels)

    for root in nvidia.__path__:
        hits = sorted(Path(root).glob("*/bin/nvdisasm"))
        if hits:
            return str(hits[0])
    pytest.fail("no nvdisasm: install the test extra (pip install -e '.[test]': nvidia-cuda-nvdisasm)")


@pytest.mark.slow
@pytest.mark.parametrize("source", PER_LOGIT_SOURCES)
def test_per_logit_kernels_have_no_float64_instruction_on_sm_120(source, tmp_path):
    try:
        from kdtree_cli.native_build.ninja_file import CXX_STANDARD
        from kdtree_cli.native_build.profiles import get_profile
        from kdtree_cli.native_build.toolchain import find_cublas, find_cuda, find_cxx

        cuda, cxx = find_cuda(), find_cxx()
        includes = [PROJECT_ROOT / "csrc", *cuda.include_dirs, find_cublas(cuda).include_dir]
    except Exception as exc:  # no CUDA toolkit or host compiler here: nothing to compile with
        pytest.skip(f"no CUDA toolkit / host compiler: {exc}")
    cubin = tmp_path / "out.cubin"
    cmd = [str(cuda.nvcc), CXX_STANDARD, *get_profile("release").nvcc_flags, "--expt-relaxed-constexpr", "-ccbin", cxx,
           *(f"-I{d}" for d in dict.fromkeys(includes)), f"-gencode=arch=compute_{ARCH},code=sm_{ARCH}", "-cubin",
           "-o", str(cubin), str(PROJECT_ROOT / "csrc" / source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sass = subprocess.run([_nvdisasm(cuda.home), str(cubin)], capture_output=True, text=True, check=True).stdout
    kernels = kernel_opcodes(sass)
    assert kernels and all(len(ops) > 20 for ops in kernels.values()), f"no kernel read in {source}'s SASS"
    found = {name: sorted(set(fp64_opcodes(ops))) for name, ops in kernels.items() if fp64_opcodes(ops)}
    assert not found, f"float64 instructions on sm_{ARCH} in csrc/{source}: {found}"
