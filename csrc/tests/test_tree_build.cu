// tree_build and topk_logprobs on the GPU against refs/tree_build.kdtr (the Python
// reference's heap), plus random tie-heavy cases from python_engine.refgen.tree_fuzz_cases
// when $KDTREE_TREE_FUZZ names such a bundle, and the launchers' argument errors.
#include <cstdlib>

#include "device_buffer.h"
#include "kernels/tree_build.cuh"
#include "common/kernel_checks/tree_build_cases.h"

using namespace kdtree;
using namespace kdtree::test;

namespace {

struct GpuTreeRunner {
  int exact_compaction = 0;  // TopkLogprobsParams::force_exact_compaction
  int topk_variant = -1;     // TopkLogprobsParams::variant (the scan; -1 the default)
  KernelResult topk(TopkIO& t) {
    DeviceCopies dev;
    TopkLogprobsParams p = topk_params(t, dev);
    p.force_exact_compaction = exact_compaction;
    p.variant = topk_variant;
    const KernelResult r = topk_logprobs(p, nullptr);
    if (!r.ok()) return r;
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(t.logp);
    dev.download(t.tok);
    return r;
  }

  KernelResult build(TreeBuildIO& io) {
    DeviceCopies dev;
    const KernelResult r = tree_build(tree_build_params(io, dev), nullptr);
    if (!r.ok()) return r;
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(io.n);
    dev.download(io.tokens);
    dev.download(io.depth_out);
    dev.download(io.parent);
    dev.download(io.positions);
    dev.download(io.score);
    dev.download(io.vis);
    return r;
  }
};

const KdtrFile& bundle() {
  static const KdtrFile f(repo_path("refs/tree_build.kdtr"));
  return f;
}

}  // namespace

KD_GPU_TEST(single_cases_from_topk_arrays_and_logits) {
  GpuTreeRunner runner;
  const int n = static_cast<int>(scalar(bundle(), "num_cases"));
  for (int i = 0; i < n; ++i) {
    if (quick_mode() && scalar(bundle(), "c" + std::to_string(i) + ".budget") > 256) continue;
    run_single_case(runner, bundle(), i, i % 2 == 0 ? 0 : 3);
  }
}

KD_GPU_TEST(batches_mixed_budgets) {
  GpuTreeRunner runner;
  const int n = static_cast<int>(scalar(bundle(), "num_batches"));
  for (int j = 0; j < n; ++j) {
    if (quick_mode() && bundle().get("b" + std::to_string(j) + ".budget").numel() > 8) continue;
    run_batch_case(runner, bundle(), j);
  }
}

KD_GPU_TEST(budget_outside_max_budget_gives_n_minus_one) {
  GpuTreeRunner runner;
  run_bad_budget_case(runner);
}

// topk_logprobs on fresh random rows (seed from KDTREE_SEED or the clock, printed) at the
// engine's vocabulary, against the host reference; 600 rows take the 128-thread blocks.
KD_GPU_TEST(topk_random_rows) {
  const char* env = std::getenv("KDTREE_SEED");
  const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  GpuTreeRunner runner;
  run_random_topk_cases(runner, seed, !quick_mode());
  run_random_topk_case(runner, "normal", 600, 8192, 256, seed + 9);
  run_random_topk_case(runner, "ascending", 300, 4096, 1024, seed + 10);
  GpuTreeRunner exact;  // the scan's compactions keeping exactly K (by default they keep a bound)
  exact.exact_compaction = 1;
  run_random_topk_cases(exact, seed, !quick_mode());
  for (const int variant : {kTopkScan2, kTopkScanLean}) {  // both scans, whichever is the default
    GpuTreeRunner scan;
    scan.topk_variant = variant;
    run_random_topk_cases(scan, seed + 100 * (variant + 1), !quick_mode());
    run_random_topk_case(scan, "normal", 448, 163840, 256, seed + 100 * (variant + 1) + 50);
  }
}

KD_GPU_TEST(fuzz_bundle_from_env) {
  const char* path = std::getenv("KDTREE_TREE_FUZZ");
  if (!path || !*path) KD_SKIP("set KDTREE_TREE_FUZZ to a bundle of python -m python_engine.refgen.tree_fuzz_cases");
  const KdtrFile f(path);
  if (f.has("seed")) std::printf("    fuzz bundle seed %lld\n", static_cast<long long>(scalar(f, "seed")));
  GpuTreeRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) {
    const int before = failures_in_case();
    run_single_case(runner, f, i, i % 3);
    if (failures_in_case() != before) std::printf("    (fuzz case c%d failed)\n", i);
  }
}

// ---- argument checks (no GPU needed) -------------------------------------------------------

namespace {
TreeBuildParams valid_params() {
  static int32_t dummy_i[8];
  static float dummy_f[8];
  static uint32_t dummy_u[8];
  TreeRequests requests;
  requests.batch = 2;
  requests.depth = 4;
  requests.max_budget = 16;
  requests.budget = dummy_i;
  TopkRows topk;
  topk.k = 8;
  topk.logp = dummy_f;
  topk.tok = dummy_i;
  TreeArrays trees;
  trees.rows = 17;  // max_nodes 16
  trees.vis_words = 1;
  trees.n = trees.tokens = trees.depth = trees.parent = dummy_i;
  trees.vis = dummy_u;
  return make_tree_build_params(requests, topk, trees);
}
}  // namespace

KD_TEST(launcher_rejects_impossible_requests) {
  KD_EXPECT(check_tree_build_params(valid_params()).ok());
  TreeBuildParams p = valid_params();
  p.batch = 0;
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kInvalidArgument);
  p = valid_params();
  p.depth = kTreeMaxDepth + 1;
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kOverLimit);
  p = valid_params();
  p.max_budget = kTreeMaxNodes + 1;
  p.max_nodes = kTreeMaxNodes + 1;
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kOverLimit);
  p = valid_params();
  p.max_nodes = 8;  // fewer output rows than the budget needs
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kInvalidArgument);
  p = valid_params();
  p.vis_words = 0;
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kInvalidArgument);
  p = valid_params();
  p.logp = nullptr;
  KD_EXPECT_EQ(check_tree_build_params(p).status, KernelStatus::kInvalidArgument);
  TopkLogits logits;
  logits.rows = 1;
  logits.vocab = 10;
  logits.logits = reinterpret_cast<float*>(p.n_out);
  TopkRows out;
  out.k = 11;  // more columns than the vocabulary
  out.logp = reinterpret_cast<float*>(p.n_out);
  out.tok = p.n_out;
  TopkLogprobsParams t = make_topk_logprobs_params(logits, out);
  KD_EXPECT_EQ(check_topk_logprobs_params(t).status, KernelStatus::kOverLimit);
  t.k = kTreeMaxNodes + 1;
  t.vocab = 5000;
  KD_EXPECT_EQ(check_topk_logprobs_params(t).status, KernelStatus::kOverLimit);
}

KD_GPU_TEST(launcher_returns_errors_without_launching) {
  TreeBuildParams p = valid_params();
  p.depth = kTreeMaxDepth + 1;
  const KernelResult r = tree_build(p, nullptr);
  KD_EXPECT_EQ(r.status, KernelStatus::kOverLimit);
  KD_EXPECT(r.message.find("depth") != std::string::npos);
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  KD_EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

KD_TEST_MAIN()
