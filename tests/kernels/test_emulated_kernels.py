"""The CUDA kernels of csrc/kernels run on the CPU through the SIMT emulator
(csrc/kernels/emu/): tree_build + topk_logprobs, tree_accept + cache_compact + the chain,
and verify_attn (float32, both bf16 tile configurations, with and without split-KV),
compared with the committed reference bundles and a fresh tie-heavy fuzz bundle.

No GPU needed: g++ compiles the kernels' own source with the emulator (each CUDA thread a
fiber; barriers and warp collectives switch fibers; mma/ldmatrix follow the PTX fragment
layouts). It checks indexing, fragment layouts, masking, tie order and the split-KV merge;
it does not detect races (compute-sanitizer on the GPU does: `kdtree test --native --sanitize racecheck`).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from python_engine.refgen.tree_fuzz_cases import write_fuzz_bundle
from python_engine.project import PROJECT_ROOT

ROOT = PROJECT_ROOT
CSRC = ROOT / "csrc"
PROGRAMS = ["emu_tree_build_test", "emu_tree_accept_test", "emu_verify_attn_test", "emu_tree_build_profile",
            "emu_simt_test", "emu_topk_profile", "emu_topk_test"]
SUMMARY = "passed, "

pytestmark = pytest.mark.slow  # ~1 minute to compile, ~1 minute to run on 2 cores


def _toolchain():
    try:
        from kdtree_cli.native_build.toolchain import find_cuda, find_cxx

        return find_cuda(), find_cxx()
    except Exception as exc:  # no CUDA headers or no g++: nothing to build against
        pytest.skip(f"no CUDA toolkit / host compiler: {exc}")


@pytest.fixture(scope="module")
def emulated() -> dict[str, Path]:
    """The emulator programs, built by `kdtree build emu_tests` (bin/emu/ of the release build)."""
    _toolchain()
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest, build

    outcome = build(BuildRequest(targets=("emu_tests",)), console=Console(stderr=True, quiet=True))
    return {name: outcome.configured.build_dir / "bin" / "emu" / name for name in PROGRAMS}


def _run(exe: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env={**os.environ, "KDTREE_REPO_ROOT": str(ROOT), **(env or {})})
    out = proc.stdout + proc.stderr
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert proc.returncode == 0 and " 0 failed" in last, out[-6000:]
    return out


# tree_build's searches (read by the plan from the environment): the one-pass search (the
# default where it applies: N <= 256, K >= N, D <= 15), and the sweep it falls back to, with and
# without its level raise (KD_TREE_SEARCH=sweep turns the one-pass search off)
SEARCHES = {
    "onepass": {},
    "sweep": {"KD_TREE_SEARCH": "sweep", "KD_TREE_LEVEL_RAISE": "0"},
    "sweep-level-raise": {"KD_TREE_SEARCH": "sweep", "KD_TREE_LEVEL_RAISE": "1"},
}
FUZZ_CASES = 200  # enough for every search path to be taken (one-pass: ~25 tie runs, ~20 hand-overs)


def _onepass_tally(out: str, what: str) -> tuple[int, int, int]:
    """The emulated test's one-pass line for `what`: (built, tie runs re-ordered, gave up)."""
    line = next(x for x in out.splitlines() if x.strip().startswith(f"{what}: one-pass"))
    nums = [int(w) for w in line.replace("(", " ").replace(")", " ").replace(",", " ").split() if w.isdigit()]
    return nums[0], nums[1], nums[2]


@pytest.mark.parametrize("search", SEARCHES)
def test_tree_build_on_emulator(emulated, seed, search):
    out = _run(emulated["emu_tree_build_test"], "tree_build_single", "tree_build_batches", "tree_build_bad",
               "topk_random", env={"KD_SEED": str(seed), **SEARCHES[search]})
    assert "4 passed" in out
    built, _, _ = _onepass_tally(out, "batches")
    assert (built > 0) == (search == "onepass"), out  # the bundle's batches go through the search under test


@pytest.mark.parametrize("search", SEARCHES)
def test_tree_build_fuzz_on_emulator(emulated, tmp_path, seed, search):
    bundle = write_fuzz_bundle(tmp_path / "fuzz.kdtr", FUZZ_CASES, seed)
    out = _run(emulated["emu_tree_build_test"], "tree_build_fuzz", env={"KD_TREE_FUZZ": str(bundle), **SEARCHES[search]})
    assert "1 passed" in out
    built, ties, gave_up = _onepass_tally(out, "fuzz cases")
    if search == "onepass":
        # every path of the one-pass search was taken, and its trees equal the reference's: its
        # own order, its re-ordering of exact score ties by rank path, its hand-over to the sweep
        assert built > 0 and ties > 0 and gave_up > 0, out
    else:
        assert built == 0 and gave_up == 0, out


@pytest.mark.parametrize("search", SEARCHES)
def test_tree_build_barrier_budget_and_heap_agreement(emulated, search):
    """The profile tool's trees equal the C++ reference heap's on bench_kernels' inputs, and the
    barriers per request stay near what docs/kernels/tree_build.md states. Barriers count rounds of
    the search, not time, but more of them would mean the search regressed."""
    proc = subprocess.run([str(emulated["emu_tree_build_profile"]), "2"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **SEARCHES[search]})
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "barriers/request" in line]
    assert len(rows) == 15
    assert all(line.endswith("trees differing from the heap: 0") for line in rows), proc.stdout

    def row(kind: str, n: int) -> str:
        return next(r for r in rows if r.startswith(kind) and f"N={n} " in r)

    def barriers(kind: str, n: int) -> float:
        return float(row(kind, n).split("barriers/request")[1].split("|")[0])

    if search == "onepass":
        # the counted threshold's program (a barrier per depth it needs), then one per
        # synchronised level and 5 around them; N > 256 is the sweep's (the sweep at N=256: 33/16.5/41)
        assert barriers("flat", 256) < 19 and barriers("logits", 256) < 14 and barriers("peaky", 256) < 21
        assert barriers("flat", 16) < 14

        def most(kind: str, n: int, what: str) -> int:  # the profile's "what mean/max": the max
            return int(row(kind, n).split(f"{what} ")[1].split("/")[1].split(" ")[0])

        # the threshold is <= t* (else fewer than N candidates: the search gives up) and close
        # to it: the candidates, pool nodes in the N-th best's bin and above, are ~N
        def candidates(kind: str, n: int) -> int:
            return most(kind, n, "candidates")

        for kind in ("flat", "logits", "peaky"):
            assert "gave up in 0 of 2" in row(kind, 256) and "gave up in 0 of 2" in row(kind, 16), row(kind, 256)
            assert 256 <= candidates(kind, 256) <= 300 and 16 <= candidates(kind, 16) <= 24, row(kind, 256)

        # the levels the warps grow alone, for a request's slowest warp (a batch takes its slowest
        # request's time): the tree's depth below the synchronised levels
        def warp_levels(kind: str, n: int) -> int:
            return most(kind, n, "warp_levels")

        assert warp_levels("flat", 256) <= 6 and warp_levels("peaky", 256) <= 7 and warp_levels("logits", 256) == 0
    elif search == "sweep":
        # at 5b8da44: 56/22/60 (8 requests); at d5b15fd 36/17/46 (the raise's deeper sample,
        # compaction instead of a second sweep, two barriers per level and per raise); now
        # 33/16.5/41: the last, small levels grown by warp 0 alone (warp_tail)
        assert barriers("flat", 256) < 37 and barriers("logits", 256) < 19 and barriers("peaky", 256) < 45
    else:
        # the level raise: 23/16/25 and flat N=16 16 (25 without): t rises every level, no
        # overflow raise and no narrowing on these inputs, the last (empty) level not grown,
        # the last small levels by warp 0 alone
        assert barriers("flat", 256) < 27 and barriers("logits", 256) < 19 and barriers("peaky", 256) < 30
        assert barriers("flat", 16) < 20


def test_topk_float_pairs_and_near_ties_fuzz_on_emulator(emulated, seed):
    """topk_logprobs without float64 (csrc/kernels/float_pair.cuh): the pair exp and log within
    2^-46 and 2^-45 of long double's, logp rounded once, the lse rounded as float64 holds it, the
    kernel's lse of 163840-logit rows within 2^-46 of long double's, and rows with planted ties,
    near-ties and logps 2^-38 off halfway between two float32 (24 seeds drawn from `seed`, both
    scans, every block size) giving the float64 reference's ids and log-probabilities bit for bit."""
    out = _run(emulated["emu_topk_test"], env={"KD_SEED": str(seed)})
    assert "5 passed" in out, out[-3000:]


def test_topk_scans_agree_and_barrier_budget(emulated):
    """topk_logprobs' two scans (TopkScanVariant) give the same log-probabilities on bench rows
    (448 x 163840, K=256 in docs/kernels/topk_logprobs.md; 4 rows here), neither re-reads a row, and the lean scan's
    compactions and final select keep their fewer barriers (at 1d4e2ca+: 6 per compaction and
    16 for the select, against topk2's 12 and 21.5; the summary 1 against 15)."""
    proc = subprocess.run([str(emulated["emu_topk_profile"]), "4"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "differ" not in out, out
    rows = [line for line in out.splitlines() if line.startswith("variant ")]
    assert len(rows) == 2 and all("0.000 re-reads" in r for r in rows), out
    lean = out.split("variant 1 ")[1]
    each = float(lean.split("compactions")[2].split("(")[1].split(" each")[0])
    summary = float(lean.split("summary ")[1].split(",")[0])
    select = float(lean.split("select ")[1].split(",")[0])
    assert each <= 7 and summary <= 2 and select <= 19, out


def test_accept_compaction_chain_on_emulator(emulated):
    _run(emulated["emu_tree_accept_test"])


def _run_attn_cases(exe: Path, tmp_path: Path, seed: int, shapes, env: dict[str, str] | None = None) -> str:
    """Write one case per (heads, n, prefixes) with the large-case generator (float64
    reference) and run them through the launcher's own plan on the emulator's pretend device,
    in float32 and bf16."""
    import numpy as np
    import torch

    from python_engine.kdtr import write_kdtr
    from python_engine.refgen.large_attn_cases import make_case

    for i, (heads, n, prefixes) in enumerate(shapes):
        tensors = make_case(torch, np.random.default_rng(seed + i), torch.Generator().manual_seed(seed + i), heads, n,
                            prefixes, "cpu")
        write_kdtr(tmp_path / f"{i:02d}_h{heads}_n{n}.kdtr", tensors)
    out = _run(exe, "verify_attn_large_from_env",
               env={"KD_LARGE_ATTN_DIR": str(tmp_path), **(env or {})})
    assert "1 passed" in out and out.count(" bf16 ") == len(shapes), out[-3000:]
    return out


def test_verify_attn_decode_shapes_on_emulator(emulated, tmp_path, seed):
    """Decode shapes (T * H <= 32 query rows) through the launcher's own plan on a pretend
    8-SM device: the decode kernel with prefixes split over every SM, an empty request in a
    batch, a 32-token tree tail, prefixes not a multiple of the key tile; against the float64
    reference, in float32 (exactness path) and bf16."""
    shapes = [(8, 1, [3000, 1500, 0]), (16, 1, [2500]), (1, 31, [700]), (4, 5, [1234, 64]), (2, 15, [999])]
    out = _run_attn_cases(emulated["emu_verify_attn_test"], tmp_path, seed, shapes)
    assert out.count("splits of") == 2 * len(shapes)


def test_verify_attn_verify_shapes_on_emulator(emulated, tmp_path, seed):
    """Verify shapes (T * H > 32 query rows) through the launcher's own plan on a pretend
    8-SM H200: the tile the plan picks on compute capability 9.0 (the seesaw wgmma one, config
    10), its prefix split over several CTAs, full prefix tiles (the unmasked path) and a ragged
    last one, per-request prefixes in a batch, an empty prefix; against the float64 reference."""
    shapes = [(16, 8, [2048 + 37, 64, 0]), (8, 64, [1536]), (4, 15, [777, 1600])]
    out = _run_attn_cases(emulated["emu_verify_attn_test"], tmp_path, seed, shapes)
    configs = [int(c) for c in re.findall(r"config (\d+)", out)]
    assert configs == [2, 10] * len(shapes), out[-3000:]  # float32, bf16 as planned (kVerifyBf16WgmmaSeesaw)
    splits = [int(c) for c in re.findall(r"(\d+) splits of", out)]
    assert max(splits) > 1, out[-3000:]


def test_emulator_schedules_collectives_and_barriers(emulated, seed):
    out = _run(emulated["emu_simt_test"], env={"KDTREE_TEST_SEED": str(seed)})
    assert "4 passed" in out


@pytest.mark.parametrize("case,report", [
    ("exited", "warp collective while some lanes of the warp have exited"),
    ("deadlock", "deadlock: threads wait at a barrier that the others never reach"),
    ("cluster", "deadlock: threads wait at the cluster barrier that others never reach"),
])
def test_emulator_reports_a_broken_kernel_instead_of_running_it(emulated, case, report):
    proc = subprocess.run([str(emulated["emu_simt_test"]), "--abort", case], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and report in proc.stderr, proc.stdout + proc.stderr


def test_verify_attn_on_emulator(emulated):
    out = _run(emulated["emu_verify_attn_test"], "verify_attn_one_split", "verify_attn_forced_splits",
               "tma_probe_matches_layout", "verify_attn_decode_tiles_long_prefixes", "verify_attn_seesaw_pairs")
    assert out.count(" f32 ") >= 18 and out.count(" bf16 cfg1 ") >= 18
    assert sum(out.count(f"decode cfg{c} ") for c in (3, 4, 11, 12)) == 8  # each decode tile, one split and several
    # the seesaw pairs (config 14, a baseline): one pair (the output written directly) and several, odd counts evened
    assert out.count("seesaw pairs split_keys ") == 5 and "[       OK ] verify_attn_seesaw_pairs" in out, out[-3000:]


def test_verify_attn_probes_merge_and_plan_on_emulator(emulated):
    """The wgmma operand probe against a double matmul, the split merge's kernels against a
    float64 merge of random partials (some splits empty), the workspace bound over every prefix,
    the device profiles' rule (they only take away), the two float32 tiles bit for bit."""
    names = ("wgmma_probe_matches_matmul", "verify_merge_matches_double", "verify_attn_workspace_bound_covers_every_prefix",
             "device_profiles_only_take_away", "verify_attn_f32_tiles_equal_bitwise")
    out = _run(emulated["emu_verify_attn_test"], *names)
    assert all(f"[       OK ] {n}" in out for n in names), out[-3000:]


# ct200's GPU (sm_120): 99 KB of shared memory a block, no wgmma. Under the profile the
# emulator reports its limits and compute capability 12.0, and the plans take what it has.
PRO = {"KDTREE_DEVICE_PROFILE": "rtx-pro-6000"}
# verify_attn's configurations over sm_120's 101,376 bytes a block, or needing wgmma
PRO_UNAVAILABLE = (0, 2, 3, 10, 11)


def test_verify_attn_under_the_rtx_pro_6000_profile(emulated):
    """Every configuration that fits sm_120 (float32's 8-row tile 13; bf16's 12, the one its plan
    takes, and the one-stage baselines 1 and 4, csrc/dev/) against the bundle, one split and several; the decode tiles over long prefixes; the TMA
    probe (sm_120 has bulk tensor copies); the workspace bound. The others are skipped, each
    with its reason printed, and none of them runs."""
    out = _run(emulated["emu_verify_attn_test"], "verify_attn_one_split", "verify_attn_forced_splits",
               "verify_attn_decode_tiles_long_prefixes", "tma_probe_matches_layout", "wgmma_probe_matches_matmul",
               "verify_attn_workspace_bound_covers_every_prefix", env=PRO)
    assert "emulated device: rtx-pro-6000 (188 SMs, 101376 bytes" in out, out[:2000]
    assert out.count(" f32 cfg13 ") >= 12 and out.count(" bf16 cfg1 ") >= 12, out[-3000:]
    assert out.count(" bf16 cfg4 ") > 0 and out.count(" bf16 cfg12 ") > 0, out[-3000:]
    assert sum(out.count(f"decode cfg{c} ") for c in (4, 12)) == 4 and "decode cfg3 " not in out
    for c in PRO_UNAVAILABLE:
        assert f" cfg{c} " not in out, f"config {c} ran under the profile"
        assert f"skipped on this device: config {c} needs " in out, f"config {c}'s skip says no reason"
    assert "[ SKIPPED  ] wgmma_probe_matches_matmul: the emulated device has no wgmma" in out
    assert "[       OK ] tma_probe_matches_layout" in out


def test_verify_attn_plans_the_sm120_tiles_under_the_profile(emulated, tmp_path, seed):
    """The launcher's own plan under the profile, on fresh cases against the float64
    reference: float32 takes the 8-row tile (config 13, which fits 99 KB where config 2's
    113,488 bytes do not), bf16 the two-stage 16-row tile (config 12) at every shape, verify
    and decode."""
    shapes = [(16, 8, [2048 + 37, 64, 0]), (8, 1, [3000, 1500, 0]), (4, 5, [1234, 64])]
    out = _run_attn_cases(emulated["emu_verify_attn_test"], tmp_path, seed, shapes, env=PRO)
    configs = [int(c) for c in re.findall(r"config (\d+)", out)]
    assert configs[0::2] == [13] * len(shapes), out[-3000:]
    assert configs[1::2] == [12] * len(shapes), out[-3000:]


def test_verify_attn_kimi_rank_shapes_under_the_rtx_pro_6000_profile(emulated, seed):
    """Kimi K2.6's attention on one rank of eight (8 heads) at n = 1, 2, 9, 17, 33, 65 drafted
    tokens (random trees), prefixes of up to 3000 keys: the sm_120 plan's tile (config 12) with
    the profile's 188 SMs, with 4, and forced with 256-key splits, against the float32 kernel;
    and the sm_120 plan for those shapes at 32k and 128k fills the profile's SMs."""
    names = ("verify_attn_kimi_rank_shapes", "verify_attn_sm120_plan_fills_its_sms")
    out = _run(emulated["emu_verify_attn_test"], *names, env={"KDTREE_TEST_SEED": str(seed), **PRO})
    assert all(f"[       OK ] {n}" in out for n in names), out[-3000:]
    assert out.count("      config 12: ") == 6 * 3, out[-3000:]
    assert out.count(" on 188 SMs") == 6 * 2, out[-3000:]


def test_tree_build_and_topk_under_the_rtx_pro_6000_profile(emulated, seed):
    """tree_build and top-K with sm_120's limits (188 SMs, 99 KB a block): the committed cases
    and batches, the unstaged sweep (logp rows read from global memory) on every case."""
    out = _run(emulated["emu_tree_build_test"], "tree_build_single", "tree_build_batches", "tree_build_unstaged",
               "topk_random", env={"KD_SEED": str(seed), **PRO})
    assert "emulated device: rtx-pro-6000" in out and "4 passed" in out, out[-3000:]
    unstaged = int(re.search(r"unstaged builds (\d+), staged 0", out).group(1))
    assert unstaged > 0, out[-3000:]


def test_an_unknown_device_profile_is_refused_with_the_known_names(emulated):
    proc = subprocess.run([str(emulated["emu_verify_attn_test"]), "verify_attn_one_split"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "KDTREE_REPO_ROOT": str(ROOT), "KDTREE_DEVICE_PROFILE": "rtx-pro-9000"})
    assert proc.returncode != 0, proc.stdout
    assert "KDTREE_DEVICE_PROFILE=rtx-pro-9000 names no device profile (known: h200, rtx-pro-6000)" in proc.stderr
