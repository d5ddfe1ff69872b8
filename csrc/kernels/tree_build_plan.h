// How tree_build and topk_logprobs launch: block size, dynamic shared memory, kernel variant.
// Pure functions of the arguments and the device's shared-memory limit, called by the
// launchers (tree_build.cu) and by the CPU-emulated tests (emu/emu_runners.h), so both run
// the kernels exactly the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "topk_logprobs_kernels.cuh"
#include "tree_build.cuh"
#include "tree_build_kernels.cuh"

namespace kdtree {

struct TreeBuildPlan {
  int blocks = 0;          // one per request
  int threads = 0;
  size_t smem_bytes = 0;   // dynamic shared memory per block
  bool staged = false;     // the logp rows are copied into shared memory beside the node pool
  bool level_raise = false;  // the sweep raises its threshold every level (tree_build_kernels.cuh,
                            //   LevelRaise): env KD_TREE_LEVEL_RAISE=1; off by default until timed
                            //   faster on the H200 (docs/kernels/tree_build.md)
  bool lone = false;        // one block per SM (the kernel instance with registers to spare): the
                            //   batch fits one wave of single blocks, or two blocks' shared memory
                            //   would not fit an SM anyway
  bool onepass = true;      // requests within its limits try the one-pass search first
                            //   (tree_build_onepass.cuh); env KD_TREE_SEARCH=sweep turns it off
                            //   (tests and A/B timing of the searches it falls back to)
};

struct TopkLogprobsPlan {
  int blocks = 0;          // one per row
  int threads = 0;         // 128..512: fewer rows than fill the SMs get more threads each
  size_t smem_bytes = 0;   // the candidate buffer
  bool vec4 = false;       // 16-byte loads: V % 4 == 0 and 16-byte aligned logits
  bool lean = false;       // the lean scan (TopkScanVariant)
  kern::TopkOptions opt;   // the kernel's options
};

// smem_optin: the largest dynamic shared memory one block may use on the device; sms, smem_per_sm:
// its SM count and shared memory per SM.
inline KernelResult make_tree_build_plan(const TreeBuildParams& p, size_t smem_optin, int sms, size_t smem_per_sm,
                                         TreeBuildPlan* plan) {
  if (KernelResult r = check_tree_build_params(p); !r.ok()) return r;
  TreeBuildPlan pl;
  pl.blocks = p.batch;
  pl.threads = kern::kTreeBuildThreads;
  pl.smem_bytes = kern::tree_build_smem_size(p.depth, p.topk, p.max_budget, smem_optin);
  if (pl.smem_bytes > smem_optin)
    return KernelResult::over_limit("tree_build: needs " + std::to_string(pl.smem_bytes) +
                                    " bytes of shared memory per block, the device allows " + std::to_string(smem_optin));
  pl.staged = pl.smem_bytes > kern::tree_build_base_smem();
  pl.lone = p.batch <= sms || 2 * pl.smem_bytes > smem_per_sm;
  static const bool level_raise = [] {  // read once per process (the launcher runs per decode step)
    const char* v = std::getenv("KD_TREE_LEVEL_RAISE");
    return v && v[0] == '1';
  }();
  pl.level_raise = level_raise;
  static const bool sweep_only = [] {
    const char* v = std::getenv("KD_TREE_SEARCH");
    return v && std::string(v) == "sweep";
  }();
  pl.onepass = !sweep_only;
  *plan = pl;
  return KernelResult::success();
}

// sms: the device's SM count. The block size is the largest of 128/256/512 threads for which
// one resident wave (kTopkThreadsPerSM threads per SM) still holds every row, so short row
// counts spread each row over more warps instead of leaving SMs idle.
inline KernelResult make_topk_logprobs_plan(const TopkLogprobsParams& p, size_t smem_optin, int sms, TopkLogprobsPlan* plan) {
  if (KernelResult r = check_topk_logprobs_params(p); !r.ok()) return r;
  TopkLogprobsPlan pl;
  pl.blocks = p.rows;
  pl.threads = kern::kTopkMaxThreads;
  const int64_t wave = static_cast<int64_t>(sms > 0 ? sms : 1) * kern::kTopkThreadsPerSM;
  while (pl.threads > kern::kTopkMinThreads && static_cast<int64_t>(p.rows) * pl.threads > wave) pl.threads /= 2;
  pl.lean = (p.variant < 0 ? kern::kTopkDefaultVariant : p.variant) == kTopkScanLean;
  pl.smem_bytes = pl.lean ? 0 : kern::topk_smem_bytes(p.k);  // the lean scan's buffer is static
  if (pl.smem_bytes > smem_optin)
    return KernelResult::over_limit("topk_logprobs: k " + std::to_string(p.k) + " needs " + std::to_string(pl.smem_bytes) +
                                    " bytes of shared memory per block, the device allows " + std::to_string(smem_optin));
  pl.vec4 = p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  pl.opt.compact_slop = p.force_exact_compaction ? 0 : kern::kTopkCompactSlop;
  *plan = pl;
  return KernelResult::success();
}

// The kernel instance a plan launches (the launcher and the emulator both take it from here).
using TopkLogprobsKernel = void (*)(TopkLogprobsParams, kern::TopkOptions);
template <bool Lean>
TopkLogprobsKernel topk_logprobs_kernel_of(const TopkLogprobsPlan& plan) {
  switch (plan.threads) {
    case 128: return plan.vec4 ? kern::topk_logprobs_kernel<true, 128, Lean> : kern::topk_logprobs_kernel<false, 128, Lean>;
    case 256: return plan.vec4 ? kern::topk_logprobs_kernel<true, 256, Lean> : kern::topk_logprobs_kernel<false, 256, Lean>;
    default: return plan.vec4 ? kern::topk_logprobs_kernel<true, 512, Lean> : kern::topk_logprobs_kernel<false, 512, Lean>;
  }
}
inline TopkLogprobsKernel topk_logprobs_kernel_for(const TopkLogprobsPlan& plan) {
  return plan.lean ? topk_logprobs_kernel_of<true>(plan) : topk_logprobs_kernel_of<false>(plan);
}
static_assert(kern::kTopkMinThreads == 128 && kern::kTopkMaxThreads == 512, "topk_logprobs_kernel_for covers every block size");
static_assert(kTopkScanVariants == 2, "topk_logprobs_kernel_for covers every scan");

}  // namespace kdtree
