// How tree_build and topk_logprobs launch: block size, dynamic shared memory, kernel variant.
// Pure functions of the arguments and the device's shared-memory limit, called by the
// launchers (tree_build.cu) and by the CPU-emulated tests (emu/emu_runners.h), so both run
// the kernels exactly the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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
};

struct TopkLogprobsPlan {
  int blocks = 0;          // one per row, or the split's blocks
  int threads = 0;         // 128..512: fewer rows than fill the SMs get more threads each
  size_t smem_bytes = 0;   // the candidate buffer
  bool vec4 = false;       // 16-byte loads: V % 4 == 0 and 16-byte aligned logits
  bool split = false;      // rows split over blocks (kern::TopkSplit below), else one block per row
  kern::TopkSplit sp;      // the split's layout (when split); compact_slop always
  size_t workspace_bytes = 0;  // what the split needs (also set when the workspace lacks it)
};

// smem_optin: the largest dynamic shared memory one block may use on the device.
inline KernelResult make_tree_build_plan(const TreeBuildParams& p, size_t smem_optin, TreeBuildPlan* plan) {
  if (KernelResult r = check_tree_build_params(p); !r.ok()) return r;
  TreeBuildPlan pl;
  pl.blocks = p.batch;
  pl.threads = kern::kTreeBuildThreads;
  pl.smem_bytes = kern::tree_build_smem_size(p.depth, p.topk, p.max_budget, smem_optin);
  if (pl.smem_bytes > smem_optin)
    return KernelResult::over_limit("tree_build: needs " + std::to_string(pl.smem_bytes) +
                                    " bytes of shared memory per block, the device allows " + std::to_string(smem_optin));
  pl.staged = pl.smem_bytes > kern::tree_build_base_smem();
  *plan = pl;
  return KernelResult::success();
}

// The split (topk_logprobs_kernels.cuh: rows x V logits cut into `blocks` equal ranges of the
// concatenated rows, one per block) for `threads`-thread blocks, or false when the shape cannot
// take one: each row must meet at most topk_max_pieces(k) ranges (their K-candidate sets
// are merged in one block's buffer), and unless `forced` each range holds a few scan steps.
inline bool make_topk_split(const TopkLogprobsParams& p, int sms, int threads, bool forced, kern::TopkSplit* out) {
  const int max_pieces = kern::topk_max_pieces(p.k);
  if (max_pieces < 2) return false;
  const int64_t total = static_cast<int64_t>(p.rows) * p.vocab;
  int64_t slots = static_cast<int64_t>(sms > 0 ? sms : 1) * (kern::kTopkThreadsPerSM / threads);
  if (forced) slots = std::max<int64_t>(slots, kern::kTopkForcedMinBlocks);
  // a row of V meets at most ceil(V / L) + 1 ranges of L
  int64_t min_len = kern::ceil_div<int64_t>(p.vocab, max_pieces - 1);
  if (!forced) min_len = std::max<int64_t>(min_len, static_cast<int64_t>(kern::kTopkMinPieceSteps) * kern::kTopkPerThread * threads);
  const int64_t blocks = std::min<int64_t>(slots, total / min_len);
  if (blocks < 2) return false;
  kern::TopkSplit sp;
  sp.len = kern::round_up<int64_t>(kern::ceil_div<int64_t>(total, blocks), kern::kTopkPieceAlign);
  sp.blocks = static_cast<int>(kern::ceil_div<int64_t>(total, sp.len));
  sp.per_block = static_cast<int>(kern::ceil_div<int64_t>(sp.len, p.vocab)) + 1;
  if (sp.blocks < 2) return false;
  *out = sp;
  return true;
}

// Bytes of workspace a split takes: a counter per row, then a slot per (block, piece).
inline size_t topk_split_workspace_bytes(const TopkLogprobsParams& p, const kern::TopkSplit& sp) {
  return kern::topk_counter_bytes(p.rows) + static_cast<size_t>(sp.blocks) * sp.per_block * kern::topk_slot_bytes(p.k);
}

// A bound on the workspace of every split with rows <= max_rows and k <= max_k at this vocab
// on `sms` SMs, forced or not (what an engine sizes once for all its shapes): blocks x
// per_block <= blocks (L / V + 2) <= rows + 2 blocks + kTopkPieceAlign blocks / V, and blocks
// never pass the resident slots of 128-thread blocks (or kTopkForcedMinBlocks).
inline size_t topk_split_workspace_bound(int max_rows, int vocab, int max_k, int sms) {
  const int64_t blocks = std::max<int64_t>(static_cast<int64_t>(sms > 0 ? sms : 1) * (kern::kTopkThreadsPerSM / kern::kTopkMinThreads),
                                           kern::kTopkForcedMinBlocks);
  const int64_t slots = max_rows + 2 * blocks + kern::ceil_div<int64_t>(kern::kTopkPieceAlign * blocks, std::max(vocab, 1));
  return kern::topk_counter_bytes(max_rows) + static_cast<size_t>(slots) * kern::topk_slot_bytes(max_k);
}

// sms: the device's SM count. The block size is the largest of 128/256/512 threads for which
// one resident wave (kTopkThreadsPerSM threads per SM) still holds every row, so short row
// counts spread each row over more warps instead of leaving SMs idle. Rows that do not
// divide evenly over the SMs (448 rows on 132 SMs: 52 SMs hold 4, 80 hold 3, the 4-row SMs
// set the time) are split over blocks instead when the workspace allows it (or whenever
// force_split is 2): each SM then gets the same share of logits. `assume_workspace`: plan as if
// the workspace were large enough (topk_logprobs_workspace_bytes).
inline KernelResult make_topk_logprobs_plan(const TopkLogprobsParams& p, size_t smem_optin, int sms, TopkLogprobsPlan* plan,
                                            bool assume_workspace = false) {
  if (KernelResult r = check_topk_logprobs_params(p); !r.ok()) return r;
  TopkLogprobsPlan pl;
  pl.blocks = p.rows;
  pl.threads = kern::kTopkMaxThreads;
  const int64_t wave = static_cast<int64_t>(sms > 0 ? sms : 1) * kern::kTopkThreadsPerSM;
  while (pl.threads > kern::kTopkMinThreads && static_cast<int64_t>(p.rows) * pl.threads > wave) pl.threads /= 2;
  if (p.force_threads > 0) pl.threads = p.force_threads;
  pl.smem_bytes = kern::topk_smem_bytes(p.k);
  if (pl.smem_bytes > smem_optin)
    return KernelResult::over_limit("topk_logprobs: k " + std::to_string(p.k) + " needs " + std::to_string(pl.smem_bytes) +
                                    " bytes of shared memory per block, the device allows " + std::to_string(smem_optin));
  pl.vec4 = p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  pl.sp.compact_slop = p.force_exact_compaction ? 0 : kern::kTopkCompactSlop;
  if (p.force_split != 1) {
    const bool forced = p.force_split == 2;
    kern::TopkSplit sp;
    bool want = make_topk_split(p, sms, pl.threads, forced, &sp);
    if (want && !forced) {
      // rows per SM (its load, in rows of work) whole rows would give the busiest SM, against
      // the split's, with a margin for the split's extra selects and merges
      const int s = sms > 0 ? sms : 1;
      const double whole = static_cast<double>(kern::ceil_div(p.rows, s));
      const double split = static_cast<double>(kern::ceil_div(sp.blocks, s)) * static_cast<double>(sp.len) / p.vocab;
      want = split * (1.0 + kern::kTopkSplitMargin) < whole;
    }
    if (forced && !want)
      return KernelResult::over_limit("topk_logprobs: force_split 2 but rows " + std::to_string(p.rows) + " x vocab " +
                                      std::to_string(p.vocab) + " (k " + std::to_string(p.k) + ") cannot be split");
    if (want) {
      const size_t need = topk_split_workspace_bytes(p, sp);
      if (assume_workspace || (p.workspace && p.workspace_bytes >= need)) {
        pl.split = true;
        sp.compact_slop = pl.sp.compact_slop;
        pl.sp = sp;
        pl.blocks = sp.blocks;
      } else if (forced) {
        return KernelResult::invalid("topk_logprobs: force_split 2 needs a workspace of " + std::to_string(need) + " bytes, got " +
                                     std::to_string(p.workspace_bytes));
      }
      pl.workspace_bytes = need;
    }
  }
  *plan = pl;
  return KernelResult::success();
}

// The kernel instance a plan launches (the launcher and the emulator both take it from here).
using TopkLogprobsKernel = void (*)(TopkLogprobsParams, kern::TopkSplit);
template <bool Split>
inline TopkLogprobsKernel topk_logprobs_kernel_split(const TopkLogprobsPlan& plan) {
  switch (plan.threads) {
    case 128: return plan.vec4 ? kern::topk_logprobs_kernel<true, 128, Split> : kern::topk_logprobs_kernel<false, 128, Split>;
    case 256: return plan.vec4 ? kern::topk_logprobs_kernel<true, 256, Split> : kern::topk_logprobs_kernel<false, 256, Split>;
    default: return plan.vec4 ? kern::topk_logprobs_kernel<true, 512, Split> : kern::topk_logprobs_kernel<false, 512, Split>;
  }
}
inline TopkLogprobsKernel topk_logprobs_kernel_for(const TopkLogprobsPlan& plan) {
  return plan.split ? topk_logprobs_kernel_split<true>(plan) : topk_logprobs_kernel_split<false>(plan);
}
static_assert(kern::kTopkMinThreads == 128 && kern::kTopkMaxThreads == 512, "topk_logprobs_kernel_for covers every block size");

}  // namespace kdtree
