// tree_accept and cache_compact on the GPU against refs/tree_accept.kdtr and
// refs/compaction.kdtr, and the on-device chain against refs/ddtree_chain.kdtr:
// topk_logprobs -> tree_build -> stand-in verify -> tree_accept -> cache_compact, with no
// host round trip between the stages (one stream, results copied back once at the end).
#include "device_buffer.h"
#include "kernels/tree_accept.cuh"
#include "kernels/tree_build.cuh"
#include "common/kernel_checks/stand_in_verify.cuh"
#include "common/kernel_checks/tree_accept_cases.h"

using namespace kdtree;
using namespace kdtree::test;

namespace {

struct GpuAcceptRunner {
  KernelResult accept(AcceptIO& io) {
    DeviceCopies dev;
    const KernelResult r = tree_accept(tree_accept_params(io, dev), nullptr);
    if (!r.ok()) return r;
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(io.accepted);
    dev.download(io.accept_len);
    dev.download(io.bonus);
    return r;
  }

  KernelResult compact(CompactIO& io) {
    DeviceCopies dev;
    const KernelResult r = cache_compact(cache_compact_params(io, dev), nullptr);
    if (!r.ok()) return r;
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(io.cache);
    return r;
  }

  KernelResult chain(ChainIO& io) {
    cudaStream_t stream;
    KD_CUDA_CHECK(cudaStreamCreate(&stream));
    struct StreamGuard {
      cudaStream_t s;
      ~StreamGuard() { cudaStreamDestroy(s); }
    } guard{stream};
    TreeBuildIO& t = io.tree;
    // topk's outputs are tree_build's inputs: one device copy of t.logp / t.tok serves both
    t.logp.assign(static_cast<size_t>(t.batch) * t.depth * t.topk, poison_f32());
    t.tok.assign(t.logp.size(), kPoisonI32);
    DeviceCopies dev;  // every upload (in building the parameters) before the first launch
    const TopkLogprobsParams tp = chain_topk_params(io, dev);
    const TreeBuildParams bp = tree_build_params(t, dev);
    const StandInVerifyParams v = chain_verify_params(io, dev);
    const TreeAcceptParams ap = chain_accept_params(io, dev);
    const CacheCompactParams cp = chain_compact_params(io, dev);

    if (KernelResult r = topk_logprobs(tp, stream); !r.ok()) return r;
    if (KernelResult r = tree_build(bp, stream); !r.ok()) return r;
    stand_in_verify_kernel<<<dim3(v.rows, v.batch), kStandInThreads, 0, stream>>>(v);
    KD_CHECK_LAUNCH();
    if (KernelResult r = tree_accept(ap, stream); !r.ok()) return r;
    if (KernelResult r = cache_compact(cp, stream); !r.ok()) return r;

    KD_CUDA_CHECK(cudaStreamSynchronize(stream));
    dev.download(t.logp);
    dev.download(t.tok);
    dev.download(t.n);
    dev.download(t.tokens);
    dev.download(t.depth_out);
    dev.download(t.parent);
    dev.download(io.acc.accepted);
    dev.download(io.acc.accept_len);
    dev.download(io.acc.bonus);
    dev.download(io.cache);
    return KernelResult::success();
  }
};

}  // namespace

KD_GPU_TEST(accept_cases_no_match_full_match_mid_tree) {
  const KdtrFile f(repo_path("refs/tree_accept.kdtr"));
  GpuAcceptRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) run_accept_case(runner, f, i);
}

KD_GPU_TEST(accept_batched_with_skipped_request) {
  const KdtrFile f(repo_path("refs/tree_accept.kdtr"));
  GpuAcceptRunner runner;
  run_accept_batch(runner, f);
}

KD_GPU_TEST(compaction_in_place_two_layers) {
  const KdtrFile f(repo_path("refs/compaction.kdtr"));
  GpuAcceptRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) {
    run_compact_case(runner, f, i, false);
    run_compact_case(runner, f, i, true);
  }
}

KD_GPU_TEST(chain_topk_build_verify_accept_compact_on_device) {
  const KdtrFile f(repo_path("refs/ddtree_chain.kdtr"));
  GpuAcceptRunner runner;
  run_chain_case(runner, f);
}

KD_TEST(launchers_reject_impossible_requests) {
  int32_t dummy[4] = {0, 0, 0, 0};
  TreeArrays trees;
  trees.rows = 4;
  trees.n = trees.tokens = trees.parent = dummy;
  AcceptedPaths paths;
  paths.max_path = 3;
  paths.accepted = paths.accept_len = paths.bonus = dummy;
  TreeAcceptParams p = make_tree_accept_params(1, trees, target_tokens(dummy), paths);
  KD_EXPECT(check_tree_accept_params(p).ok());
  p.batch = 0;
  KD_EXPECT_EQ(check_tree_accept_params(p).status, KernelStatus::kInvalidArgument);
  p.batch = 1;
  p.max_path = kAcceptMaxPath + 1;
  KD_EXPECT_EQ(check_tree_accept_params(p).status, KernelStatus::kOverLimit);
  p.max_path = 3;
  p.choice = nullptr;  // and no logits either
  KD_EXPECT_EQ(check_tree_accept_params(p).status, KernelStatus::kInvalidArgument);
  CacheWords cache;
  cache.cache = reinterpret_cast<uint32_t*>(dummy);
  cache.row_words = 8;
  cache.row_stride = 4;  // rows overlap
  CacheCompactParams c = make_cache_compact_params(1, cache, dummy, paths);
  KD_EXPECT_EQ(check_cache_compact_params(c).status, KernelStatus::kInvalidArgument);
  c.row_stride = 8;
  KD_EXPECT(check_cache_compact_params(c).ok());
  c.cache = nullptr;
  KD_EXPECT_EQ(check_cache_compact_params(c).status, KernelStatus::kInvalidArgument);
}

KD_TEST_MAIN()
