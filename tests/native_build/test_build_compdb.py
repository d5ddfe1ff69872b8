"""nvcc command lines rewritten for clangd (clang's CUDA dialect)."""

from __future__ import annotations

from pathlib import Path

from kdtree_cli.native_build.arch import CudaArch
from kdtree_cli.native_build.compdb import rewrite_nvcc_args


def test_nvcc_only_flags_are_dropped_and_host_flags_unwrapped():
    nvcc = ["/cuda/bin/nvcc", "-std=c++17", "-O3", "-lineinfo", "-G", "-Xcompiler", "-Wall,-Wextra",
            "--expt-relaxed-constexpr", "-ccbin", "/usr/bin/g++",
            "-gencode=arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_120,code=sm_120",
            "-Xptxas", "-v", "--threads=4", "-I/repo/csrc", "-DNDEBUG", "-DROOT=\"/r\"",
            "--generate-dependencies-with-compile", "--dependency-output", "obj/a.cu.o.d",
            "-Xcompiler=-fno-strict-aliasing", "-c", "/repo/csrc/a.cu", "-o", "obj/a.cu.o"]
    archs = [CudaArch(90, "a"), CudaArch(120)]
    got = rewrite_nvcc_args(nvcc, Path("/cuda"), archs)
    assert got == [
        "clang++", "-x", "cuda", "--cuda-host-only", "--cuda-path=/cuda", "--no-cuda-version-check",
        "--cuda-gpu-arch=sm_90a", "--cuda-gpu-arch=sm_120",
        "-std=c++17", "-O3", "-Wall", "-Wextra", "-I/repo/csrc", "-DNDEBUG", "-DROOT=\"/r\"",
        "-fno-strict-aliasing", "-c", "/repo/csrc/a.cu", "-o", "obj/a.cu.o",
    ]
