// How tree_build launches: block size, dynamic shared memory, kernel variant (topk_logprobs':
// topk_logprobs_plan.h). Pure functions of the arguments and the device's limits, called by the
// launcher (tree_build.cu) and by the CPU-emulated tests (emu/emu_runners.h), so both run the
// kernels exactly the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

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

}  // namespace kdtree
