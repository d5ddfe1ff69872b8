// Launchers of tree_accept and cache_compact (API: tree_accept.cuh; kernels:
// tree_accept_kernels.cuh).
#include <string>

#include "tree_accept.cuh"
#include "tree_accept_kernels.cuh"

namespace kdtree {
namespace {

KernelResult launch_error(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return KernelResult::success();
  return KernelResult::cuda(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace

KernelResult tree_accept(const TreeAcceptParams& p, cudaStream_t stream) {
  if (KernelResult r = check_tree_accept_params(p); !r.ok()) return r;
  KD_LAUNCH(kern::tree_accept_kernel, p.batch, kern::kAcceptThreads, 0, stream, p);
  return launch_error("tree_accept_kernel launch");
}

KernelResult cache_compact(const CacheCompactParams& p, cudaStream_t stream) {
  if (KernelResult r = check_cache_compact_params(p); !r.ok()) return r;
  const bool vec4 = p.row_words % 4 == 0 && p.row_stride % 4 == 0 && p.batch_stride % 4 == 0 &&
                    p.layer_stride % 4 == 0 && reinterpret_cast<uintptr_t>(p.cache) % 16 == 0;
  const int vec = vec4 ? 4 : 1;
  const int per_block = kern::kCompactThreads * vec;
  const dim3 grid((p.row_words + per_block - 1) / per_block, p.batch, p.layers);
  if (vec4) KD_LAUNCH(kern::cache_compact_kernel<4>, grid, kern::kCompactThreads, 0, stream, p);
  else KD_LAUNCH(kern::cache_compact_kernel<1>, grid, kern::kCompactThreads, 0, stream, p);
  return launch_error("cache_compact_kernel launch");
}

}  // namespace kdtree
