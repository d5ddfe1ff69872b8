// The bf16 verify_attn kernels: both tile configurations and the merge, bf16 output.
#include "launch_support.h"
#include "verify_attn_bf16.cuh"
#include "verify_attn_launch.h"

namespace kdtree {

namespace {
template <class Cfg>
KernelResult launch_config(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  auto* kernel = kern::verify_attn_bf16_kernel<Cfg, __nv_bfloat16>;
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, "verify_attn (bf16)");
      !r.ok())
    return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(k);
  return launch_status("verify_attn_bf16_kernel launch");
}
}  // namespace

KernelResult launch_verify_attn_bf16(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  KernelResult r = plan.config == kVerifyBf16Sm90 ? launch_config<kern::Bf16AttnSm90>(k, plan, stream)
                                                   : launch_config<kern::Bf16AttnSmall>(k, plan, stream);
  if (!r.ok() || plan.splits == 1) return r;
  kern::verify_merge_kernel<__nv_bfloat16><<<dim3(k.rows, k.p.batch), kern::kMergeThreads, 0, stream>>>(k);
  return launch_status("verify_merge_kernel (bf16) launch");
}

}  // namespace kdtree
