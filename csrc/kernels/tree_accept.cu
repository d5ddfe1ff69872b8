// Launchers of tree_accept and cache_compact (API: tree_accept.cuh; plans: tree_accept_plan.h;
// kernels: tree_accept_kernels.cuh).
#include "launch_support.h"
#include "tree_accept_plan.h"

namespace kdtree {

KernelResult tree_accept(const TreeAcceptParams& p, cudaStream_t stream) {
  TreeAcceptPlan plan;
  if (KernelResult r = make_tree_accept_plan(p, &plan); !r.ok()) return r;
  KD_LAUNCH(kern::tree_accept_kernel, plan.blocks, plan.threads, 0, stream, p);
  return launch_status("tree_accept_kernel launch");
}

KernelResult cache_compact(const CacheCompactParams& p, cudaStream_t stream) {
  CacheCompactPlan plan;
  if (KernelResult r = make_cache_compact_plan(p, &plan); !r.ok()) return r;
  if (plan.vec4) KD_LAUNCH(kern::cache_compact_kernel<4>, plan.grid, plan.threads, 0, stream, p);
  else KD_LAUNCH(kern::cache_compact_kernel<1>, plan.grid, plan.threads, 0, stream, p);
  return launch_status("cache_compact_kernel launch");
}

}  // namespace kdtree
