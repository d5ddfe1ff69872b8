// The launcher of tree_build (API: tree_build.cuh; plan: tree_build_plan.h; kernels:
// tree_build_kernels.cuh; topk_logprobs' launcher is topk_logprobs.cu). It checks every
// argument, plans for the current device, launches on the caller's stream and checks the launch.
#include "launch_support.h"
#include "tree_build_plan.h"

namespace kdtree {

size_t tree_build_smem_bytes(int depth, int topk, int max_budget) {
  DeviceLimits dev;
  if (!current_device_limits(&dev).ok()) return 0;
  return kern::tree_build_smem_size(depth, topk, max_budget, static_cast<size_t>(dev.smem_optin));
}

KernelResult tree_build(const TreeBuildParams& p, cudaStream_t stream) {
  DeviceLimits dev;
  if (KernelResult r = check_tree_build_params(p); !r.ok()) return r;
  if (KernelResult r = current_device_limits(&dev); !r.ok()) return r;
  TreeBuildPlan plan;
  if (KernelResult r = make_tree_build_plan(p, static_cast<size_t>(dev.smem_optin), dev.sms,
                                            static_cast<size_t>(dev.smem_per_sm), &plan);
      !r.ok())
    return r;
  auto* kernel = kern::tree_build_kernel_for(plan.staged, plan.level_raise, plan.lone);
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), plan.smem_bytes, "tree_build"); !r.ok())
    return r;
  KD_LAUNCH(kernel, plan.blocks, plan.threads, plan.smem_bytes, stream, p, plan.onepass);
  return launch_status("tree_build_kernel launch");
}

}  // namespace kdtree
