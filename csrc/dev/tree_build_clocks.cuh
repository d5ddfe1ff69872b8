// Per-phase cycle counts of tree_build on the GPU, a measuring build: -DKD_TREE_PHASE_CLOCKS
// (csrc/dev/README.md). tree_build_common.cuh includes this in place of its empty marks: thread 0
// of block kTreeClkBlock sums clock64() deltas per phase over launches and prints the averages
// every kTreeClkEvery launches; every block's SM, start and length are summarised too.
#pragma once

#include <cstdio>

#include "kernels/device_compat.cuh"

namespace kdtree::kern {

constexpr int kTreeClkSlots = 40;
constexpr unsigned kTreeClkEvery = 40;
__device__ unsigned long long g_tree_clk[kTreeClkSlots];
__device__ unsigned g_tree_clk_launches;
constexpr unsigned kTreeClkBlock = 0;  // the block (request) whose phases are clocked
KD_DEVICE bool tree_clk_on() { return threadIdx.x == 0 && blockIdx.x == kTreeClkBlock; }
// A launch's sums in shared memory (a global read-modify-write per phase put an L2 round trip
// on thread 0's path each time), added to g_tree_clk at the report.
KD_DEVICE unsigned long long* tree_clk_launch() {
  __shared__ unsigned long long acc[kTreeClkSlots];
  return acc;
}
// Every block's SM, start (globaltimer, ns) and length (clock64) of a launch, summarised by the
// last block through (tree_clk_blocks): how a batch's time relates to block 0's.
constexpr int kTreeClkMaxBlocks = 1024;
__device__ unsigned long long g_tree_blk_start[kTreeClkMaxBlocks], g_tree_blk_cycles[kTreeClkMaxBlocks];
__device__ unsigned g_tree_blk_sm[kTreeClkMaxBlocks], g_tree_blk_done, g_tree_blk_launches;
KD_DEVICE unsigned long long& tree_clk_block_t0() {
  __shared__ unsigned long long t0;
  return t0;
}
KD_DEVICE void tree_clk_start() {
  if (tree_clk_on())
    for (int i = 0; i < kTreeClkSlots; ++i) tree_clk_launch()[i] = 0;
  if (threadIdx.x == 0 && blockIdx.x < kTreeClkMaxBlocks) {
    unsigned long long ns;
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_tree_blk_start[blockIdx.x] = ns;
    g_tree_blk_sm[blockIdx.x] = sm;
    tree_clk_block_t0() = clock64();
  }
}
// thread 0 of every block at its end: its cycles; the last block of the launch prints the
// blocks' spread every kTreeClkEvery launches
KD_DEVICE void tree_clk_blocks() {
  if (threadIdx.x != 0 || gridDim.x > kTreeClkMaxBlocks) return;
  g_tree_blk_cycles[blockIdx.x] = clock64() - tree_clk_block_t0();
  __threadfence();
  if (atomicAdd(&g_tree_blk_done, 1u) != gridDim.x - 1) return;
  __threadfence();
  g_tree_blk_done = 0;
  if (++g_tree_blk_launches % kTreeClkEvery != 0) return;
  const int n = static_cast<int>(gridDim.x);
  unsigned long long cmax = 0, csum = 0, s_min = ~0ull, s_max = 0;
  int imax = 0, shared_sm = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned long long c = g_tree_blk_cycles[i];
    csum += c;
    if (c > cmax) cmax = c, imax = i;
    s_min = min(s_min, g_tree_blk_start[i]);
    s_max = max(s_max, g_tree_blk_start[i]);
    for (int j = 0; j < i; ++j) shared_sm += g_tree_blk_sm[j] == g_tree_blk_sm[i] ? 1 : 0;
  }
  printf("tree_clk blocks B=%d: cycles mean %.0f max %llu (block %d, SM %u; block 0 %llu), starts within %llu ns, "
         "block pairs on one SM %d\n", n, static_cast<double>(csum) / n, cmax, imax, g_tree_blk_sm[imax],
         g_tree_blk_cycles[0], s_max - s_min, shared_sm);
}
#define TREE_CLK_BEGIN(var) long long var = tree_clk_on() ? clock64() : 0
#define TREE_CLK_RESTART(var) var = tree_clk_on() ? clock64() : 0
#define TREE_CLK_END(var, slot)                                                                     \
  do {                                                                                              \
    if (tree_clk_on()) tree_clk_launch()[slot] += static_cast<unsigned long long>(clock64() - var); \
  } while (0)
KD_DEVICE void tree_clk_report(int budget) {
  tree_clk_blocks();
  if (!tree_clk_on()) return;
  for (int i = 0; i < kTreeClkSlots; ++i) g_tree_clk[i] += tree_clk_launch()[i];
  g_tree_clk[15] += 1;
  if (++g_tree_clk_launches % kTreeClkEvery != 0) return;
  const double c = static_cast<double>(g_tree_clk[15]);
  const auto* g = g_tree_clk;
  printf("tree_clk B=%d N=%d launches=%.0f | stage %.0f sweep %.0f (grow %.0f x%.1f, raise %.0f x%.1f, compact %.0f) "
         "bisect %.0f ties %.0f narrow %.0f keys %.0f sort %.0f emit %.0f vis %.0f | onepass %.0f%% (levels %.0f x%.1f, "
         "select %.0f, warp levels %.0f, fell back %.0f%%) | total %.0f cycles\n",
         gridDim.x, budget, c, g[0] / c, g[1] / c, g[9] / c, g[11] / c, g[10] / c, g[12] / c, g[13] / c, g[2] / c,
         g[3] / c, g[4] / c, g[5] / c, g[6] / c, g[7] / c, g[8] / c, 100.0 * g[16] / c, g[17] / c, g[18] / c,
         g[19] / c, g[20] / c, 100.0 * g[21] / c, g[14] / c);
  if (g[16] > 0)
    printf("tree_clk onepass steps (thread 0, per launch): level 1 %.0f, barrier 1 %.0f | per later level x%.1f: t %.0f, "
           "count %.0f, room %.0f, write %.0f, barrier %.0f | select: t %.0f, collect %.0f | first t (spine bound) %.0f\n",
           g[22] / c, g[23] / c, g[18] / c, g[24] / c, g[25] / c, g[26] / c, g[27] / c, g[28] / c, g[29] / c, g[30] / c,
           g[31] / c);
  if (g[kTreeClkWarpDetail + 1] > 0)
    printf("tree_clk warp levels (thread 0's warp, per launch): start %.0f | per level x%.2f: room %.0f, write %.0f | "
           "wait for the others %.0f\n",
           g[kTreeClkWarpDetail] / c, g[kTreeClkWarpDetail + 1] / c, g[kTreeClkWarpDetail + 2] / c,
           g[kTreeClkWarpDetail + 3] / c, g[kTreeClkWarpDetail + 4] / c);
  for (int i = 0; i < kTreeClkSlots; ++i) g_tree_clk[i] = 0;
}
#define TREE_CLK_COUNT(slot) \
  do {                       \
    if (tree_clk_on()) tree_clk_launch()[slot] += 1; \
  } while (0)

}  // namespace kdtree::kern
