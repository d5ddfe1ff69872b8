// Thread block clusters (sm_90+): a launch with a cluster shape, a block's rank in its cluster,
// its peers' shared memory (distributed shared memory) and the cluster barrier. On the GPU
// through cooperative_groups; on the SIMT emulator through emu/simt_emulator.h (launch_cluster,
// which runs a cluster's blocks together). A block launched without a cluster, or compiled for
// a GPU before sm_90, is a cluster of one: rank 0, its own shared memory, the block barrier.
#pragma once

#include "device_compat.cuh"

#if !defined(KD_SIMT_EMULATION)
#include <cooperative_groups.h>
#endif

// On the GPU (kernel source files):
//   KD_LAUNCH_CLUSTER(cluster, kernel, grid, block, smem, stream, args...) -> cudaError_t
#if defined(KD_SIMT_EMULATION)
#define KD_LAUNCH_CLUSTER(cluster, kernel, grid, block, smem, stream, ...) \
  (::kdemu::launch_cluster(dim3(grid), dim3(cluster), dim3(block), (smem), kernel, __VA_ARGS__), cudaSuccess)
#else
template <typename... KArgs, typename... Args>
inline cudaError_t kd_launch_cluster(dim3 cluster, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster.x;
  attr[0].val.clusterDim.y = cluster.y;
  attr[0].val.clusterDim.z = cluster.z;
  return kd_launch_ex(attr, 1u, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}
#define KD_LAUNCH_CLUSTER(cluster, kernel, grid, block, smem, stream, ...) \
  ::kd_launch_cluster(dim3(cluster), kernel, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__)
#endif

namespace kdtree::kern {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(KD_SIMT_EMULATION)
#define KD_CLUSTER_DEVICE 1  // the real thing
#endif

// This block's rank in its cluster (x fastest, as %cluster_ctarank).
KD_DEVICE int cluster_rank() {
#if defined(KD_SIMT_EMULATION)
  return ::kdemu::cluster_rank();
#elif defined(KD_CLUSTER_DEVICE)
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return 0;
#endif
}

// Blocks in this block's cluster.
KD_DEVICE int cluster_size() {
#if defined(KD_SIMT_EMULATION)
  return ::kdemu::cluster_size();
#elif defined(KD_CLUSTER_DEVICE)
  return static_cast<int>(cooperative_groups::this_cluster().num_blocks());
#else
  return 1;
#endif
}

// `local` (in this block's dynamic shared memory) as it lies in block `rank` of the cluster:
// loads and stores through the result reach that block's shared memory.
template <class T>
KD_DEVICE T* cluster_peer(T* local, int rank) {
#if defined(KD_SIMT_EMULATION)
  return static_cast<T*>(::kdemu::cluster_map(local, rank));
#elif defined(KD_CLUSTER_DEVICE)
  return cooperative_groups::this_cluster().map_shared_rank(local, static_cast<unsigned>(rank));
#else
  (void)rank;
  return local;
#endif
}

// Every thread of every block of the cluster meets here (barrier.cluster arrive + wait: the
// shared-memory writes before it are visible to the peers' reads after it). Call it before a
// block exits while a peer may still read or write its shared memory.
KD_DEVICE void cluster_barrier() {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::cluster_sync();
#elif defined(KD_CLUSTER_DEVICE)
  cooperative_groups::this_cluster().sync();
#else
  __syncthreads();
#endif
}

}  // namespace kdtree::kern
