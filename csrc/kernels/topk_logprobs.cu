// The launcher of topk_logprobs (API: tree_build.cuh; plan: topk_logprobs_plan.h; kernels:
// topk_logprobs_kernels.cuh), in its own translation unit so that its kernels build (and are
// checked for float64 instructions: tests/native_build/test_topk_no_fp64.py) alone. It checks
// every argument, plans for the current device, launches on the caller's stream and checks the
// launch.
#include "launch_support.h"
#include "topk_logprobs_plan.h"

namespace kdtree {

namespace {

// The plan, the kernel instance and its shared-memory settings for a topk_logprobs launch on
// the current device (shared by the launcher and the occupancy query).
KernelResult prepare_topk_logprobs(const TopkLogprobsParams& p, TopkLogprobsPlan* plan, TopkLogprobsKernel* kernel) {
  DeviceLimits dev;
  if (KernelResult r = check_topk_logprobs_params(p); !r.ok()) return r;
  if (KernelResult r = current_device_limits(&dev); !r.ok()) return r;
  if (KernelResult r = make_topk_logprobs_plan(p, static_cast<size_t>(dev.smem_optin), dev.sms, plan); !r.ok()) return r;
  *kernel = topk_logprobs_kernel_for(*plan);
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(*kernel), plan->smem_bytes, "topk_logprobs");
      !r.ok())
    return r;
  // the plan counts on kTopkThreadsPerSM / threads resident blocks, which needs ~150 KB of
  // shared memory per SM (exp table + candidate buffer per block)
  return prefer_shared_carveout(reinterpret_cast<const void*>(*kernel), "topk_logprobs");
}

}  // namespace

KernelResult topk_logprobs(const TopkLogprobsParams& p, cudaStream_t stream) {
  TopkLogprobsPlan plan;
  TopkLogprobsKernel kernel = nullptr;
  if (KernelResult r = prepare_topk_logprobs(p, &plan, &kernel); !r.ok()) return r;
  KD_LAUNCH(kernel, plan.blocks, plan.threads, plan.smem_bytes, stream, p, plan.opt);
  return launch_status("topk_logprobs_kernel launch");
}

KernelResult topk_logprobs_occupancy(const TopkLogprobsParams& p, int* threads, int* blocks_per_sm) {
  TopkLogprobsPlan plan;
  TopkLogprobsKernel kernel = nullptr;
  if (KernelResult r = prepare_topk_logprobs(p, &plan, &kernel); !r.ok()) return r;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kernel, plan.threads, plan.smem_bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelResult::cuda(std::string("topk_logprobs: occupancy query: ") + cudaGetErrorString(err));
  }
  *threads = plan.threads;
  return KernelResult::success();
}

}  // namespace kdtree
