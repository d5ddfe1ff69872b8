"""`kdtree build --check-resources` (kdtree_cli/native_build/resources.py): ptxas -v read per
kernel, and the sm_120 build's planned kernels held to no spill and sm_120's limits."""

from __future__ import annotations

import pytest

from kdtree_cli.native_build import resources
from kdtree_cli.native_build.resources import KernelResources, judge, parse_ptxas, short_name

# ptxas -v's shape (CUDA 13): an entry with a spill and static shared memory, a clean one, and a
# device function's properties between them that belong to no entry
PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_120'
ptxas info    : Function properties for _Z3fooPf
    96 bytes stack frame, 96 bytes spill stores, 88 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 96 bytes cumulative stack size, 4160 bytes smem
ptxas info    : Compile time = 120.000 ms
ptxas info    : Function properties for _Z6helperv
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z3barv' for 'sm_120'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 190 registers, used 0 barriers
"""


def test_parse_reads_every_entry_function():
    got = parse_ptxas(PTXAS, "kernels/x.cu")
    assert got == [KernelResources("kernels/x.cu", "_Z3fooPf", 64, 96, 88, 4160),
                   KernelResources("kernels/x.cu", "_Z3barv", 190, 0, 0, 0)]


def test_short_name_drops_the_return_type_namespaces_and_parameters():
    assert short_name("void kdtree::kern::verify_merge_kernel<float, 8>(kdtree::kern::VerifyKernelParams)") == \
        "verify_merge_kernel<float, 8>"


def _kernel(name: str, stores: int = 0, smem: int = 0) -> KernelResources:
    return KernelResources("kernels/x.cu", name, 100, stores, stores, smem)


@pytest.mark.parametrize("name,stores,smem,planned,fails", [
    ("void kdtree::kern::verify_merge_kernel<float, 8>(kdtree::kern::VerifyKernelParams)", 96, 4160, True, True),
    ("void kdtree::kern::verify_merge_kernel<float, 8>(kdtree::kern::VerifyKernelParams)", 0, 4160, True, False),
    ("void kdtree::kern::verify_attn_f32_kernel<kdtree::kern::F32AttnTile<16> >(kdtree::kern::VerifyKernelParams)",
     64, 0, False, False),  # config 2: over sm_120's shared memory, never planned there
    ("void kdtree::kern::verify_attn_seesaw_kernel<__nv_bfloat16, false>(kdtree::kern::VerifyKernelParams, "
     "kdtree::kern::AttnTmaMaps)", 16, 0, False, False),  # config 10: wgmma, never planned on sm_120
    ("void kdtree::kern::verify_attn_decode_kernel<kdtree::kern::Bf16DecodeConfig<32, 2, 1, true, 2>, __nv_bfloat16>"
     "(kdtree::kern::VerifyKernelParams)", 16, 0, True, True),  # config 12: sm_120's tile, held to no spill
    ("void kdtree::kern::tree_build_kernel<true, false, 2>(kdtree::TreeBuildParams, bool)", 24, 0, False, False),
    ("void kdtree::kern::topk_logprobs_kernel<false, 512, true>(kdtree::TopkLogprobsParams, kdtree::kern::TopkOptions)",
     16, 0, True, True),  # the lean top-K with 4-byte loads: planned, no spill accepted
    ("void kdtree::kern::tree_accept_kernel(kdtree::TreeAcceptParams)", 0, 101_377, True, True),  # over 101,376
])
def test_judge_fails_a_planned_spill_or_an_over_limit_request(name, stores, smem, planned, fails):
    v = judge("120", _kernel(name, stores, smem))
    assert v.planned == planned and bool(v.problem) == fails, v


def test_an_accepted_spill_passes_until_it_grows(monkeypatch):
    monkeypatch.setattr(resources, "KNOWN_SPILLS", (("120", r"tree_accept_kernel", 16, "a reason"),))
    name = "void kdtree::kern::tree_accept_kernel(kdtree::TreeAcceptParams)"
    assert judge("120", _kernel(name, 16)).problem == "" and "a reason" in judge("120", _kernel(name, 16)).note
    assert judge("120", _kernel(name, 24)).problem


@pytest.mark.slow
def test_sm120_planned_kernels_do_not_spill():
    """The sources of the planned kernels compiled for sm_120 alone (about a minute on two
    cores): no planned kernel spills or asks for more than sm_120 has, and the ones the plans
    pick there (the 8-row float32 tile, bf16 config 12, the merges, tree_build's one-block
    instances, the drafter's attention and merge) are among those checked, and no verify_attn baseline (csrc/dev/) is compiled."""
    try:
        from kdtree_cli.native_build.toolchain import find_cuda

        find_cuda()
    except Exception as exc:  # no CUDA toolkit: nothing to compile with
        pytest.skip(f"no CUDA toolkit: {exc}")
    from kdtree_cli.native_build.resources import ptxas_report

    verdicts = ptxas_report("120")
    bad = [f"{v.kernel.name}: {v.problem}" for v in verdicts if v.problem]
    assert not bad, "\n".join(bad)
    planned = {v.kernel.name for v in verdicts if v.planned}
    for wanted in ("F32AttnTile<8>",  # config 13
                   "Bf16DecodeConfig<32, 2, 1, true, 2>",  # config 12 (Bf16DecodeNarrowPair): sm_120's tile
                   "verify_merge_kernel<float, 8>", "verify_merge_rows_kernel", "tree_build_kernel<true, false, 1>",
                   "topk_logprobs_kernel<true, 512, true>", "tree_accept_kernel",
                   "drafter_attn_kernel<__nv_bfloat16>", "drafter_merge_kernel<float>"):
        assert any(wanted in n for n in planned), f"{wanted} not among the planned kernels checked"
    names = {v.kernel.name for v in verdicts}
    for baseline in ("verify_attn_bf16_kernel", "Bf16DecodeConfig<32, 1, 2, false, 1>"):  # configs 0 and 1, 4
        assert not any(baseline in n for n in names), f"{baseline}: a baseline (csrc/dev/) compiled into the library's sources"
    seesaw = [n for n in names if "verify_attn_seesaw_kernel" in n]
    assert len(seesaw) == 1, seesaw  # config 10 alone, not the pairs' instance (config 14)
