// The float32 verify_attn kernel and its merge.
#include "verify_attn_f32.cuh"
#include "verify_attn_launch.h"

namespace kdtree {

KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  const cudaError_t err = kern::set_max_dynamic_smem(kern::verify_attn_f32_kernel,
                                                         static_cast<int>(kern::F32Attn::kSmemBytes));
  if (err != cudaSuccess)
    return KernelResult::cuda(std::string("verify_attn (f32): cudaFuncSetAttribute: ") + cudaGetErrorString(err));
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  KD_LAUNCH(kern::verify_attn_f32_kernel, grid, kern::F32Attn::kThreads, kern::F32Attn::kSmemBytes, stream, k);
  if (KernelResult r = verify_launch_status("verify_attn_f32_kernel launch"); !r.ok() || plan.splits == 1) return r;
  KD_LAUNCH(kern::verify_merge_kernel<float>, dim3(k.rows, k.p.batch), kern::kMergeThreads, 0, stream, k);
  return verify_launch_status("verify_merge_kernel (f32) launch");
}

}  // namespace kdtree
