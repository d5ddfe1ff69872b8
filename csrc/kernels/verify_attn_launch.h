// Internal: the per-configuration launch functions of verify_attn, each defined in its own
// translation unit (verify_attn_bf16.cu, verify_attn_f32.cu) so the kernels compile in
// parallel; verify_attn.cu plans and dispatches.
#pragma once

#include <cuda_runtime_api.h>

#include "device_compat.cuh"
#include "launch_support.h"
#include "verify_attn.cuh"

namespace kdtree {
namespace kern {
struct VerifyKernelParams;
}

// Launch the attention kernel (and the merge when splits > 1) for plan.config.
KernelResult launch_verify_attn_bf16(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream);
KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream);

// The Plain launch form of verify_attn_configs.h: one block a (row tile, split, request).
// (Params: kern::VerifyKernelParams, complete where this is instantiated.)
template <class Cfg, class Kernel, class Params>
KernelResult launch_Plain(const Params& k, const VerifyAttnPlan& plan, cudaStream_t stream, Kernel kernel) {
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, "verify_attn");
      !r.ok())
    return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  KD_LAUNCH(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, k);
  return launch_status("verify_attn kernel launch");
}

// A case of the launchers' switch over plan.config, one per entry of a verify_attn_configs.h
// list: launch_<form><Cfg>(k, plan, stream, kernel) into the KernelResult r
#define KD_VERIFY_LAUNCH_CASE(config, number, rows, keys, smem, Cfg, form, ...) \
  case config:                                                                  \
    r = launch_##form<Cfg>(k, plan, stream, __VA_ARGS__);                       \
    break;

}  // namespace kdtree
