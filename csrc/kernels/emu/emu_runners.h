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
  KernelResult accept(AcceptIO& io) {
    const TreeAcceptParams p = tree_accept_params(io, host_data);
    TreeAcceptPlan plan;
    if (KernelResult r = make_tree_accept_plan(p, &plan); !r.ok()) return r;
    ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), 0, kern::tree_accept_kernel, p);
    return KernelResult::success();
  }

  KernelResult compact(CompactIO& io) {
    return launch_compact(cache_compact_params(io, host_data));
  }

  // the launcher's plan, on the emulator
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
    StandInVerifyParams v;
    v.batch = t.batch;
    v.rows = t.rows();
    v.vocab = io.vocab;
    v.width = io.width;
    v.cache_rows = io.cache_rows;
    v.n = t.n.data();
    v.tokens = t.tokens.data();
    v.past = io.past.data();
    v.bigram = io.bigram.data();
    v.embed = io.embed.data();
    std::vector<float> logits(static_cast<size_t>(t.batch) * t.rows() * io.vocab, poison_f32());
    v.logits = logits.data();
    v.cache = io.cache.data();
    ::kdemu::launch(dim3(v.rows, v.batch), dim3(kStandInThreads), 0, stand_in_verify_kernel, v);
    AcceptIO& a = io.acc;
    a.n = t.n;
    a.tokens = t.tokens;
    a.parent = t.parent;
    a.logits = std::move(logits);
    if (KernelResult r = accept(a); !r.ok()) return r;
    CacheCompactParams c;
    c.batch = t.batch;
    c.layers = 1;
    c.row_words = io.width;
    c.row_stride = io.width;
    c.batch_stride = static_cast<int64_t>(io.cache_rows) * io.width;
    c.layer_stride = 0;
    c.cache = reinterpret_cast<uint32_t*>(io.cache.data());
    c.past_len = io.past.data();
    c.accepted = a.accepted.data();
    c.accept_len = a.accept_len.data();
    c.max_path = a.max_path;
    return launch_compact(c);
  }
};

}  // namespace kdtree::test
