// Phase clocks of the verify_attn kernels (the seesaw and decode tiles), a measuring build:
// -DKD_ATTN_PHASE_CLOCKS (csrc/dev/README.md). kernels/verify_attn_clocks.cuh includes this in
// place of its empty marks.
// Per-phase cycle counts on the GPU (e.g.
// `NVCC_APPEND_FLAGS=-DKD_ATTN_PHASE_CLOCKS kdtree build --build-dir build-clk bench_kernels`):
// the first thread of each warpgroup of block (0, 0, 0) sums clock64() deltas per phase in
// shared memory and adds them to g_attn_clk at the end; the launcher then runs
// attn_clk_report_kernel, which prints the per-tile averages of both warpgroups every
// kAttnClkEvery launches ("attn_clk" lines; a printf in the attention kernel itself would make
// ptxas serialize its wgmmas, C7510).
#pragma once

#include <cstdio>

#include "kernels/device_compat.cuh"

namespace kdtree::kern {

enum AttnClkSlot : int {
  kClkTop,  // seven phases of a tile, named per kernel in attn_clk_report_kernel
  kClkSIssue,
  kClkCopyIssue,
  kClkSWait,
  kClkMax,
  kClkSoftmax,
  kClkPV,
  kClkPrologue,   // kernel start to the first tile
  kClkEpilogue,   // after the last tile to the end
  kClkTiles,
  kAttnClkSlots
};
constexpr unsigned kAttnClkEvery = 20;
__device__ unsigned long long g_attn_clk[2][kAttnClkSlots];
__device__ unsigned g_attn_clk_launches;
#define ATTN_CLK_DECL                                                                               \
  __shared__ unsigned long long attn_clk_s[2][kAttnClkSlots];                                       \
  const bool attn_clk_on = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x % 128 == 0; \
  long long attn_clk_last = clock64();                                                              \
  if (attn_clk_on)                                                                                  \
    for (int i = 0; i < kAttnClkSlots; ++i) attn_clk_s[threadIdx.x / 128][i] = 0
#define ATTN_CLK_LAP(slot)                                                                     \
  do {                                                                                         \
    if (attn_clk_on) {                                                                         \
      const long long now = clock64();                                                         \
      attn_clk_s[threadIdx.x / 128][slot] += static_cast<unsigned long long>(now - attn_clk_last); \
      attn_clk_last = now;                                                                     \
    }                                                                                          \
  } while (0)
#define ATTN_CLK_FLUSH(tiles)                                                                   \
  do {                                                                                          \
    if (attn_clk_on) {                                                                          \
      attn_clk_s[threadIdx.x / 128][kClkTiles] = static_cast<unsigned long long>(tiles);        \
      for (int i = 0; i < kAttnClkSlots; ++i) atomicAdd(&g_attn_clk[threadIdx.x / 128][i], attn_clk_s[threadIdx.x / 128][i]); \
    }                                                                                           \
  } while (0)
// The kernels that keep phase clocks, each with its names for the slots kClkTop .. kClkPV (the
// seesaw's and the decode kernel's slots mean their own phases; seesaw: a tile is half a pair).
enum AttnClkKind : int { kClkSeesaw = 0, kClkDecode = 1 };
__global__ void attn_clk_report_kernel(int kind) {  // one thread, after each attention launch
  if (++g_attn_clk_launches % kAttnClkEvery != 0) return;
  // [kind + warpgroup's share]: seesaw wg0, seesaw wg1, decode (both halves of the block)
  const char* const kNames[3][7] = {{"S", "max", "PaV", "wait-m1", "rescale", "PbV", "-"},
                                    {"S", "max+wait-m0", "softmax", "PbV", "wait-Pa", "PaV", "-"},
                                    {"wait", "S", "-", "-", "max", "softmax", "PV"}};
  const char* const kTags[2] = {" seesaw", " decode"};
  for (int g = 0; g < 2; ++g) {
    const unsigned long long* c = g_attn_clk[g];
    const double t = c[kClkTiles] > 0 ? static_cast<double>(c[kClkTiles]) : 1.0;
    const char* const* n = kNames[kind == kClkSeesaw ? g : 2];
    printf("attn_clk%s wg%d launches=%u tiles=%.0f | per tile: %s %.0f %s %.0f %s %.0f %s %.0f %s %.0f %s %.0f %s %.0f = %.0f"
           " | per launch: prologue %.0f epilogue %.0f cycles\n",
           kTags[kind], g, kAttnClkEvery, t / kAttnClkEvery, n[0], c[kClkTop] / t, n[1], c[kClkSIssue] / t,
           n[2], c[kClkCopyIssue] / t, n[3], c[kClkSWait] / t, n[4], c[kClkMax] / t, n[5], c[kClkSoftmax] / t, n[6],
           c[kClkPV] / t,
           (c[kClkTop] + c[kClkSIssue] + c[kClkCopyIssue] + c[kClkSWait] + c[kClkMax] + c[kClkSoftmax] + c[kClkPV]) / t,
           static_cast<double>(c[kClkPrologue]) / kAttnClkEvery, static_cast<double>(c[kClkEpilogue]) / kAttnClkEvery);
  }
  for (int g = 0; g < 2; ++g)
    for (int i = 0; i < kAttnClkSlots; ++i) g_attn_clk[g][i] = 0;
}

}  // namespace kdtree::kern
