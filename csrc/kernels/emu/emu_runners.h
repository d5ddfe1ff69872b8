// Runners that execute the kernels of csrc/kernels on the SIMT emulator, with the same
// interface as the GPU runners of csrc/tests/test_*.cu, so the shared case files
// (csrc/common/kernel_checks/*_cases.h) drive both.
#pragma once

#include "emu_device.h"
#include "kernels/topk_logprobs_plan.h"
#include "kernels/tree_accept_plan.h"
#include "kernels/tree_build_plan.h"
#include "common/kernel_checks/stand_in_verify.cuh"
#include "common/kernel_checks/tree_accept_cases.h"
#include "common/kernel_checks/tree_build_cases.h"

namespace kdtree::test {

// The emulated kernels work on the host vectors themselves (the case files' `at`).
inline constexpr auto host_data = [](auto& v) { return v.data(); };

struct EmuTreeRunner {
  // the emulated device (emu_device.h: KDTREE_DEVICE_PROFILE's, an H200's by default)
  size_t smem_limit = emulated_device_limits().smem_optin;  // the logp rows are staged in shared
                                                             // memory when they fit
  int sms = emulated_device_limits().sms;  // sets topk's block size and tree_build's kernel
                                           // instance (TreeBuildPlan::lone)
  size_t smem_per_sm = emulated_device_limits().smem_per_sm;
  int exact_compaction = 0;    // TopkLogprobsParams::force_exact_compaction
  int topk_variant = -1;       // TopkLogprobsParams::variant (the scan; -1 the default)
  int staged_builds = 0, unstaged_builds = 0;  // tree_build plans with the logp rows staged, and without
  KernelResult topk(TopkIO& t) {
    TopkLogprobsParams p = topk_params(t, host_data);
    p.force_exact_compaction = exact_compaction;
    p.variant = topk_variant;
    TopkLogprobsPlan plan;
    if (KernelResult r = make_topk_logprobs_plan(p, smem_limit, sms, &plan); !r.ok()) return r;
    ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), plan.smem_bytes, topk_logprobs_kernel_for(plan), p, plan.opt);
    return KernelResult::success();
  }

  KernelResult build(TreeBuildIO& io) {
    const TreeBuildParams p = tree_build_params(io, host_data);
    TreeBuildPlan plan;
    if (KernelResult r = make_tree_build_plan(p, smem_limit, sms, smem_per_sm, &plan); !r.ok()) return r;
    ++(plan.staged ? staged_builds : unstaged_builds);
    ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), plan.smem_bytes, kern::tree_build_kernel_for(plan.staged, plan.level_raise, plan.lone), p, plan.onepass);
    return KernelResult::success();
  }
};

struct EmuAcceptRunner {
  KernelResult accept(AcceptIO& io) { return launch_accept(tree_accept_params(io, host_data)); }

  KernelResult compact(CompactIO& io) {
    return launch_compact(cache_compact_params(io, host_data));
  }

  // the launchers' plans, on the emulator
  static KernelResult launch_accept(const TreeAcceptParams& p) {
    TreeAcceptPlan plan;
    if (KernelResult r = make_tree_accept_plan(p, &plan); !r.ok()) return r;
    ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), 0, kern::tree_accept_kernel, p);
    return KernelResult::success();
  }

  static KernelResult launch_compact(const CacheCompactParams& p) {
    CacheCompactPlan plan;
    if (KernelResult r = make_cache_compact_plan(p, &plan); !r.ok()) return r;
    ::kdemu::launch(plan.grid, dim3(plan.threads), 0, plan.vec4 ? kern::cache_compact_kernel<4> : kern::cache_compact_kernel<1>, p);
    return KernelResult::success();
  }

  KernelResult chain(ChainIO& io) {
    TreeBuildIO& t = io.tree;
    EmuTreeRunner trees;
    TopkIO topk;
    topk.rows = t.batch * t.depth;
    topk.vocab = io.vocab;
    topk.k = t.topk;
    topk.logits = io.draft_logits;
    topk.poison_outputs();
    if (KernelResult r = trees.topk(topk); !r.ok()) return r;
    t.logp = topk.logp;
    t.tok = topk.tok;
    if (KernelResult r = trees.build(t); !r.ok()) return r;
    const StandInVerifyParams v = chain_verify_params(io, host_data);
    ::kdemu::launch(dim3(v.rows, v.batch), dim3(kStandInThreads), 0, stand_in_verify_kernel, v);
    if (KernelResult r = launch_accept(chain_accept_params(io, host_data)); !r.ok()) return r;
    return launch_compact(chain_compact_params(io, host_data));
  }
};

}  // namespace kdtree::test
