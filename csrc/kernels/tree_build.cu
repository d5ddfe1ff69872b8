// Launchers of tree_build (API: tree_build.cuh; kernels: tree_build_kernels.cuh,
// topk_logprobs_kernels.cuh). They check every argument against the compiled limits and
// the device, then launch on the caller's stream and check the launch.
#include <string>

#include "topk_logprobs_kernels.cuh"
#include "tree_build.cuh"
#include "tree_build_kernels.cuh"

namespace kdtree {
namespace {

std::string str(long long v) { return std::to_string(v); }

KernelResult launch_error(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return KernelResult::success();
  return KernelResult::cuda(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// The largest dynamic shared memory a block may use on the current device.
KernelResult device_smem_limit(int* bytes) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess)
    return KernelResult::cuda(std::string("reading the device's shared-memory limit: ") + cudaGetErrorString(err));
  return KernelResult::success();
}

}  // namespace

size_t tree_build_smem_bytes(int depth, int topk, int max_budget) {
  int limit = 0;
  if (!device_smem_limit(&limit).ok()) return 0;
  return kern::tree_build_smem_size(depth, topk, max_budget, static_cast<size_t>(limit));
}

KernelResult tree_build(const TreeBuildParams& p, cudaStream_t stream) {
  if (KernelResult r = check_tree_build_params(p); !r.ok()) return r;
  int limit = 0;
  if (KernelResult r = device_smem_limit(&limit); !r.ok()) return r;
  const size_t smem = kern::tree_build_smem_size(p.depth, p.topk, p.max_budget, static_cast<size_t>(limit));
  if (smem > static_cast<size_t>(limit))
    return KernelResult::over_limit("tree_build: needs " + str(static_cast<long long>(smem)) +
                                    " bytes of shared memory per block, the device allows " + str(limit));
  const bool staged = smem > kern::tree_build_base_smem();  // logp rows fit beside the pool
  cudaError_t err = kern::set_max_dynamic_smem(kern::tree_build_kernel, static_cast<int>(smem));
  if (err != cudaSuccess)
    return KernelResult::cuda(std::string("tree_build: cudaFuncSetAttribute: ") + cudaGetErrorString(err));
  KD_LAUNCH(kern::tree_build_kernel, p.batch, kern::kTreeBuildThreads, smem, stream, p, staged);
  return launch_error("tree_build_kernel launch");
}

KernelResult topk_logprobs(const TopkLogprobsParams& p, cudaStream_t stream) {
  if (KernelResult r = check_topk_logprobs_params(p); !r.ok()) return r;
  KD_LAUNCH(kern::topk_logprobs_kernel, p.rows, kern::kTopkThreads, 0, stream, p);
  return launch_error("topk_logprobs_kernel launch");
}

}  // namespace kdtree
