// tree_build and topk_logprobs on the SIMT emulator (CPU), against refs/tree_build.kdtr.
// Built and run by tests/kernels/test_emulated_kernels.py; no GPU needed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

// The one-pass search's outcomes (tree_build_onepass.cuh's events, thread 0 of each request),
// printed after the cases that run tree_build, so that the Python test can see that the
// cases went through it, its tie ordering and its hand-over to the sweep.
namespace onepass_tally {
inline long built = 0, ties = 0, gave_up = 0;
inline void event(const char* name, unsigned tid) {
  if (tid != 0) return;
  if (!std::strcmp(name, "onepass_cands")) ++built;
  if (!std::strcmp(name, "onepass_ties")) ++ties;
  if (!std::strcmp(name, "onepass_gave_up")) ++gave_up;
}
inline void report(const char* what) {
  std::printf("    %s: one-pass %ld (tie runs re-ordered in %ld), gave up %ld\n", what, built, ties, gave_up);
  built = ties = gave_up = 0;
}
}  // namespace onepass_tally
#define KD_EVENT(name, a, b) ::onepass_tally::event(name, threadIdx.x)

#include "emu_runners.h"

using namespace kdtree;
using namespace kdtree::test;

namespace {
const KdtrFile& bundle() {
  static const KdtrFile f(repo_path("refs/tree_build.kdtr"));
  return f;
}
}  // namespace

KD_TEST(tree_build_single_cases) {
  EmuTreeRunner runner;
  const int n = static_cast<int>(scalar(bundle(), "num_cases"));
  for (int i = 0; i < n; ++i) {
    const char* only = std::getenv("KD_EMU_CASE");  // debugging: run case c<N> only
    if (only && std::atoi(only) != i) continue;
    run_single_case(runner, bundle(), i, i % 2 == 0 ? 0 : 3);
  }
  onepass_tally::report("single cases");
}

KD_TEST(tree_build_batches) {
  EmuTreeRunner runner;
  const int n = static_cast<int>(scalar(bundle(), "num_batches"));
  for (int j = 0; j < n; ++j) run_batch_case(runner, bundle(), j);
  onepass_tally::report("batches");
}

// The sweep reading the logp rows from global memory (not staged in shared memory): what a
// device with less shared memory a block takes for long rows (the RTX PRO 6000 for depth x K
// past ~5240). A limit of the base layout alone makes every case take it.
KD_TEST(tree_build_unstaged) {
  EmuTreeRunner runner;
  runner.smem_limit = kern::tree_build_base_smem();
  const int n = static_cast<int>(scalar(bundle(), "num_cases"));
  for (int i = 0; i < n; ++i) run_single_case(runner, bundle(), i, i % 2 == 0 ? 0 : 3);
  const int batches = static_cast<int>(scalar(bundle(), "num_batches"));
  for (int j = 0; j < batches; ++j) run_batch_case(runner, bundle(), j);
  std::printf("    unstaged builds %d, staged %d\n", runner.unstaged_builds, runner.staged_builds);
  KD_EXPECT(runner.unstaged_builds > 0);
  KD_EXPECT_EQ(runner.staged_builds, 0);
}

KD_TEST(tree_build_bad_budgets) {
  EmuTreeRunner runner;
  run_bad_budget_case(runner);
}

// Extra cases from python -m python_engine.refgen.tree_fuzz_cases (path in $KD_TREE_FUZZ).
KD_TEST(tree_build_fuzz) {
  const char* path = std::getenv("KD_TREE_FUZZ");
  if (!path || !*path) KD_SKIP("set KD_TREE_FUZZ to a bundle from python_engine.refgen.tree_fuzz_cases");
  const KdtrFile f(path);
  EmuTreeRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) {
    const int before = failures_in_case();
    run_single_case(runner, f, i, i % 3);
    if (failures_in_case() != before) std::printf("    (fuzz case c%d failed)\n", i);
  }
  onepass_tally::report("fuzz cases");
}

// topk_logprobs on fresh random rows (seed from KD_SEED or the clock, printed) against the
// host reference, with the pretend device's SM count set so that the rows take each block
// size (512, 256, 128 threads).
KD_TEST(topk_random_rows) {
  const char* env = std::getenv("KD_SEED");
  const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  for (const int sms : {132, 1}) {
    EmuTreeRunner runner;
    runner.sms = sms;  // 132: <= 4 rows -> 512 threads; 1: 2 rows -> 256, 3-4 rows -> 128
    run_random_topk_cases(runner, seed, false);
  }
  EmuTreeRunner exact;  // the scan's compactions keeping exactly K (by default they keep a bound)
  exact.exact_compaction = 1;
  run_random_topk_cases(exact, seed, false);
  EmuTreeRunner other;  // the scan that is not the default (both are kept for A/B timing)
  other.topk_variant = kern::kTopkDefaultVariant == kTopkScanLean ? kTopkScan2 : kTopkScanLean;
  run_random_topk_cases(other, seed + 30, false);
  // the engine's vocabulary: ~2000 candidates are left at the row's end, so the final select
  // cuts them by a bound first (shorter rows leave too few for that)
  EmuTreeRunner runner;
  run_random_topk_case(runner, "normal", 2, 163840, 256, seed + 20);
  run_random_topk_case(runner, "ties", 2, 163840, 256, seed + 21);
}

KD_TEST_MAIN()
