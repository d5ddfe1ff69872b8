// The float32 verify_attn kernel and its merge.
#include "launch_support.h"
#include "verify_attn_f32.cuh"
#include "verify_attn_launch.h"

namespace kdtree {

namespace {

template <class Cfg>
KernelResult launch_f32_tile(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  const auto kernel = kern::verify_attn_f32_kernel<Cfg>;
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, "verify_attn (f32)");
      !r.ok())
    return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  KD_LAUNCH(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, k);
  return launch_status("verify_attn_f32_kernel launch");
}

}  // namespace

KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  const KernelResult r = plan.config == kVerifyF32Narrow ? launch_f32_tile<kern::F32AttnNarrow>(k, plan, stream)
                                                         : launch_f32_tile<kern::F32Attn>(k, plan, stream);
  if (!r.ok() || verify_plan_parts(plan) == 1) return r;
  return launch_status(kern::launch_verify_merge<float>(k, stream, plan.merge_overlap, plan.merge_wide), "verify_merge (f32) launch");
}

}  // namespace kdtree
