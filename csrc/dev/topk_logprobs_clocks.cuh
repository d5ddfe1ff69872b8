// Per-phase cycle counts of topk_logprobs on the GPU, a measuring build: -DKD_TOPK_PHASE_CLOCKS
// (csrc/dev/README.md), e.g. through NVCC_APPEND_FLAGS. topk_logprobs_kernels.cuh includes this
// in place of its empty marks: thread 0 of block 0 sums clock64() deltas per phase over launches
// and prints the averages every kTopkClkEvery launches.
#pragma once

#include <cstdio>

#include "kernels/device_compat.cuh"

namespace kdtree::kern {

constexpr int kTopkClkSlots = 16;
constexpr unsigned kTopkClkEvery = 20;
__device__ unsigned long long g_topk_clk[kTopkClkSlots];
__device__ unsigned g_topk_clk_launches;
KD_DEVICE bool topk_clk_on() { return threadIdx.x == 0 && blockIdx.x == 0; }
#define TOPK_CLK_BEGIN(var) long long var = topk_clk_on() ? clock64() : 0
#define TOPK_CLK_END(var, slot)                                                                 \
  do {                                                                                          \
    if (topk_clk_on()) g_topk_clk[slot] += static_cast<unsigned long long>(clock64() - var); \
  } while (0)
#define TOPK_CLK_COUNT(slot)                  \
  do {                                        \
    if (topk_clk_on()) g_topk_clk[slot] += 1; \
  } while (0)
KD_DEVICE void topk_clk_report() {
  if (!topk_clk_on()) return;
  g_topk_clk[15] += 1;
  if (++g_topk_clk_launches % kTopkClkEvery != 0) return;
  const double c = static_cast<double>(g_topk_clk[15]);
  printf("topk_clk blocks=%d threads=%d launches=%.0f | table %.0f scan %.0f (compactions %.0f x%.1f) summary %.0f "
         "| logp+select %.0f keep/reread %.0f sort+out %.0f | total %.0f cycles\n",
         gridDim.x, blockDim.x, c, g_topk_clk[0] / c, g_topk_clk[1] / c, g_topk_clk[2] / c, g_topk_clk[3] / c, g_topk_clk[4] / c,
         g_topk_clk[5] / c, g_topk_clk[6] / c, g_topk_clk[7] / c, g_topk_clk[8] / c);
  for (int i = 0; i < kTopkClkSlots; ++i) g_topk_clk[i] = 0;
}
#define TOPK_CLK_REPORT() ::kdtree::kern::topk_clk_report()

}  // namespace kdtree::kern
