// The float32 verify_attn kernel and its merge.
#include "launch_support.h"
#include "verify_attn_configs.h"
#include "verify_attn_f32.cuh"
#include "verify_attn_launch.h"

namespace kdtree {

KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  using namespace kern;
  KernelResult r;
  switch (plan.config) {  // the float32 configurations (verify_attn_configs.h)
    KD_VERIFY_ATTN_F32_CONFIGS(KD_VERIFY_LAUNCH_CASE)
    default:
      return KernelResult::invalid("verify_attn (f32): plan config " + std::to_string(plan.config) + " is not a float32 one");
  }
  if (!r.ok() || verify_plan_parts(plan) == 1) return r;
  return launch_status(kern::launch_verify_merge<float>(k, stream, plan.merge_overlap, plan.merge_wide), "verify_merge (f32) launch");
}

}  // namespace kdtree
