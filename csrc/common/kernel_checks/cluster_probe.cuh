// A probe of the cluster wrappers (kernels/cluster_support.cuh) independent of any kernel that
// uses them: every block checks its rank and cluster size against the launch's cluster shape,
// reads its next peer's shared memory after a cluster barrier, then writes into that peer's
// shared memory and, after another barrier, checks what its previous peer wrote into its own.
// Run by the emulator's tests (emu_simt_test) and, on an sm_90 GPU, by test_verify_attn (the
// same kernel source), so that a wrong rank order, address mapping or barrier shows here and not
// as a wrong row of a kernel that reduces through distributed shared memory.
#pragma once

#include "kernels/cluster_support.cuh"

namespace kdtree::test {

constexpr int kClusterProbeThreads = 128;
constexpr int kClusterProbeWords = 1024;  // ints of dynamic shared memory a block
constexpr size_t kClusterProbeSmemBytes = kClusterProbeWords * sizeof(int);
enum ClusterProbeCheck : int { kProbeRank, kProbeRead, kProbeWrite, kClusterProbeChecks };

// The word block `linear` (its linear index in the grid) writes at index i in round `round`.
KD_HOST_DEVICE inline int cluster_probe_value(int linear, int i, int round) { return linear * 100003 + i * 7 + round * 13 + 1; }

// mismatches[check]: failures of each check over the grid (0 when the wrappers are right).
// cluster: the launch's cluster shape (1, 1, 1 for a launch without one).
__global__ void cluster_probe_kernel(dim3 cluster, int* mismatches) {
  KD_DYNAMIC_SMEM(int, words);
  const int tid = static_cast<int>(threadIdx.x);
  const int rank = kern::cluster_rank(), size = kern::cluster_size();
  const int cx = static_cast<int>(cluster.x), cy = static_cast<int>(cluster.y), cz = static_cast<int>(cluster.z);
  const int bx = static_cast<int>(blockIdx.x), by = static_cast<int>(blockIdx.y), bz = static_cast<int>(blockIdx.z);
  const int gx = static_cast<int>(gridDim.x), gy = static_cast<int>(gridDim.y);
  // the grid-linear index of the block of rank q in this cluster (ranks run x fastest)
  auto linear_of = [&](int q) {
    const int x = bx - bx % cx + q % cx, y = by - by % cy + (q / cx) % cy, z = bz - bz % cz + q / (cx * cy);
    return x + gx * (y + gy * z);
  };
  const int me = bx + gx * (by + gy * bz);
  if (tid == 0 && (size != cx * cy * cz || rank != bx % cx + cx * (by % cy + cy * (bz % cz)) || linear_of(rank) != me))
    atomicAdd(&mismatches[kProbeRank], 1);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (int i = tid; i < kClusterProbeWords; i += kClusterProbeThreads) words[i] = cluster_probe_value(me, i, 0);
  kern::cluster_barrier();  // every block's round-0 words written
  int bad = 0;
  const int* theirs = kern::cluster_peer(words, next);
  for (int i = tid; i < kClusterProbeWords; i += kClusterProbeThreads) bad += theirs[i] != cluster_probe_value(linear_of(next), i, 0);
  if (bad) atomicAdd(&mismatches[kProbeRead], bad);
  kern::cluster_barrier();  // every read of round 0 done before anyone overwrites
  int* into = kern::cluster_peer(words, next);
  for (int i = tid; i < kClusterProbeWords; i += kClusterProbeThreads) into[i] = cluster_probe_value(me, i, 1);
  kern::cluster_barrier();  // every remote write landed
  bad = 0;
  for (int i = tid; i < kClusterProbeWords; i += kClusterProbeThreads) bad += words[i] != cluster_probe_value(linear_of(prev), i, 1);
  if (bad) atomicAdd(&mismatches[kProbeWrite], bad);
}

}  // namespace kdtree::test
