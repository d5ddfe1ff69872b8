// How topk_logprobs launches: block size, dynamic shared memory, kernel variant. Pure functions
// of the arguments and the device's limits, called by the launcher (topk_logprobs.cu) and by the
// CPU-emulated tests (emu/emu_runners.h), so both run the kernels exactly the same way. Apart
// from tree_build_plan.h so that each launcher's translation unit builds only its own kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "topk_logprobs_kernels.cuh"
#include "tree_build.cuh"

namespace kdtree {

struct TopkLogprobsPlan {
  int blocks = 0;          // one per row
  int threads = 0;         // 128..512: fewer rows than fill the SMs get more threads each
  size_t smem_bytes = 0;   // the candidate buffer
  bool vec4 = false;       // 16-byte loads: V % 4 == 0 and 16-byte aligned logits
  bool lean = false;       // the lean scan (TopkScanVariant)
  kern::TopkOptions opt;   // the kernel's options
};

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
