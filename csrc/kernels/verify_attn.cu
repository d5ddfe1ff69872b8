// verify_attn launcher: checks, plans the split-KV grid for the current device, carves the
// workspace and dispatches to the kernel of the plan's configuration.
#include <string>

#include "launch_support.h"
#include "verify_attn.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_configs.h"
#include "verify_attn_launch.h"
#include "verify_attn_plan.h"

namespace kdtree {

std::string verify_attn_config_unbuilt(int config) {
  switch (config) {  // what the launchers' switches hold in this build (verify_attn_configs.h)
#define KD_VERIFY_CONFIG_BUILT(config, ...) case config:
    KD_VERIFY_ATTN_CONFIGS(KD_VERIFY_CONFIG_BUILT)
    KD_VERIFY_ATTN_BUILT_BASELINES(KD_VERIFY_CONFIG_BUILT)
#undef KD_VERIFY_CONFIG_BUILT
    return "";
    default:
      break;
  }
  if (!verify_config_exists(config)) return "no configuration " + std::to_string(config);
  return "config " + std::to_string(config) +
         " is a baseline (csrc/dev/verify_attn_baselines.h), compiled only into a build with -DKD_VERIFY_ATTN_BASELINES";
}

KernelResult verify_attn_plan(const VerifyAttnParams& p, VerifyAttnPlan* plan) {
  if (p.force_config >= 0)
    if (const std::string why = verify_attn_config_unbuilt(p.force_config); !why.empty())
      return KernelResult::invalid("verify_attn: force_config " + std::to_string(p.force_config) + ": " + why);
  DeviceLimits dev;
  if (KernelResult r = current_device_limits(&dev); !r.ok()) return r;
  KernelResult r = make_verify_attn_plan(p, dev.sms, dev.smem_optin, dev.smem_per_sm, plan, dev.wgmma);
  // the merge as a programmatic dependent launch where the device has it: it starts loading
  // while the last splits store
  plan->merge_overlap = r.ok() && dev.pdl;
  plan->merge_wide = r.ok() && kern::verify_merge_wide(p.batch, p.tree_len * p.heads, verify_plan_parts(*plan), dev.sms);
  return r;
}

size_t verify_attn_workspace_bytes(const VerifyAttnParams& p) {
  VerifyAttnPlan plan;
  return verify_attn_plan(p, &plan).ok() ? plan.workspace_bytes : 0;
}

size_t verify_attn_workspace_bound_bytes(const VerifyAttnParams& p) {
  VerifyAttnPlan plan;
  return verify_attn_plan(p, &plan).ok() ? plan.workspace_bound_bytes : 0;
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
