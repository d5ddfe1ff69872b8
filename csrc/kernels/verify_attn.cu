// verify_attn launcher: checks, plans the split-KV grid for the current device, carves the
// workspace and dispatches to the kernel of the plan's configuration.
#include <string>

#include "verify_attn.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_launch.h"
#include "verify_attn_plan.h"

namespace kdtree {

KernelResult verify_launch_status(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return KernelResult::success();
  return KernelResult::cuda(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

KernelResult verify_attn_plan(const VerifyAttnParams& p, VerifyAttnPlan* plan) {
  int dev = 0, sms = 0, optin = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (err != cudaSuccess) return KernelResult::cuda(std::string("verify_attn: reading device properties: ") + cudaGetErrorString(err));
  return make_verify_attn_plan(p, sms, optin, per_sm, plan);
}

size_t verify_attn_workspace_bytes(const VerifyAttnParams& p) {
  VerifyAttnPlan plan;
  return verify_attn_plan(p, &plan).ok() ? plan.workspace_bytes : 0;
}

KernelResult verify_attn(const VerifyAttnParams& p, cudaStream_t stream) {
  VerifyAttnPlan plan;
  if (KernelResult r = verify_attn_plan(p, &plan); !r.ok()) return r;
  if (p.workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && !p.workspace))
    return KernelResult::invalid("verify_attn: needs " + std::to_string(plan.workspace_bytes) +
                                 " bytes of workspace for " + std::to_string(plan.splits) + " key splits, got " +
                                 std::to_string(p.workspace_bytes) + " (ask verify_attn_workspace_bytes)");
  if (plan.workspace_bytes > 0 && reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0)
    return KernelResult::invalid("verify_attn: workspace must be 256-byte aligned (cudaMalloc memory is)");
  const kern::VerifyKernelParams k = kern::make_kernel_params(p, plan, p.workspace);
  return p.dtype == AttnDType::kBF16 ? launch_verify_attn_bf16(k, plan, stream) : launch_verify_attn_f32(k, plan, stream);
}

}  // namespace kdtree
