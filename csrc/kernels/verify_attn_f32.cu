// The float32 verify_attn kernel and its merge.
#include "launch_support.h"
#include "verify_attn_f32.cuh"
#include "verify_attn_launch.h"

namespace kdtree {

KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kern::verify_attn_f32_kernel),
                                          kern::F32Attn::kSmemBytes, "verify_attn (f32)");
      !r.ok())
    return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  KD_LAUNCH(kern::verify_attn_f32_kernel, grid, kern::F32Attn::kThreads, kern::F32Attn::kSmemBytes, stream, k);
  if (KernelResult r = launch_status("verify_attn_f32_kernel launch"); !r.ok() || verify_plan_parts(plan) == 1) return r;
  return launch_status(kern::launch_verify_merge<float>(k, stream, plan.merge_overlap, plan.merge_wide), "verify_merge (f32) launch");
}

}  // namespace kdtree
