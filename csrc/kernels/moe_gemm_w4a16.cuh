// The routed experts' grouped GEMM with INT4 weights (W4A16, docs/int4.md): the rows layout and
// both forms of moe_gemm.cuh (rows grouped by expert, x_row gather; plain and fused SwiGLU),
// bf16 activations and output, float32 accumulation, and each expert's weights kept packed on
// the device in the tile layout below. Every weight is dequantized in registers as the
// reference does it (docs/int4.md): w = bf16(q * scale), before the float32 accumulation.
//
// Weight layout ("W4A16 tiles"; repacked once at load time by moe_w4a16_repack from the
// checkpoint's compressed-tensors weight_packed / weight_scale of one expert):
//   expert = [ceil(n / 16) row tiles][ceil(k / 64) column chunks] blocks of 144 uint32 words,
//   block (t, c) = output rows 16t .. 16t+15, input columns 64c .. 64c+63:
//     words 0..127:  lane L's four words at 4L .. 4L+3 (one 16-byte load per lane). With
//                    g = L / 4 and j = L % 4 the lane owns rows 16t+g and 16t+g+8 and the 16
//                    columns 64c + 16j .. 64c + 16j + 15; word s (0..3) holds, at nibble
//                    positions (i, i+4) for i = 0..3, the pair of columns
//                    64c + 16j + 4s + 2(i/2) + {0, 1} of row 16t + g + 8(i%2).
//     words 128..143: scales, word 128 + 8h + g = (bf16 scale of row 16t+g, of row 16t+g+8)
//                    (low, high half) for the 32-column group 2c + h.
//   A nibble is stored as in the checkpoint (q + 8); padding rows and columns hold q = 0 with
//   scale 0. Bytes per expert: 0.5625 * n * k when 16 | n and 64 | k, exactly the checkpoint's.
// The lane / nibble order is that of the mma.sync m16n8k16 A fragment with weights as A
// (rows = output features) and 8 grouped rows as B, the 16 k of each instruction being the
// four columns 4s .. 4s+3 of each lane's quarter of the chunk: one 16-byte load feeds four
// mma steps, and each x row is read with two 16-byte loads per chunk.
//
// Host API; kernels and the repack in moe_gemm_w4a16.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "moe_gemm_operands.cuh"

namespace kdtree {

constexpr int kW4TileRows = 16;       // output rows per block: the mma's M
constexpr int kW4TileCols = 64;       // input columns per block: four mma k-steps of 16
constexpr int kW4GroupSize = 32;      // columns per scale (compressed-tensors group_size)
constexpr int kW4WeightWords = 128;   // 16 x 64 nibbles
constexpr int kW4ScaleWords = 16;     // 16 rows x 2 groups of bf16
constexpr int kW4BlockWords = kW4WeightWords + kW4ScaleWords;
// kAuto takes the 8-row tile up to this many tokens (decode and verify sizes, where each
// expert gets a few rows): the largest size the tile choice was measured at (moe_gemm_w4a16.cu)
constexpr int kW4SmallTileMaxTokens = 128;
// MoeW4a16Params::slot_sync applies up to this many rows per expert: single-token decode, where
// it was measured faster; at n = 8 it was a wash and at n = 64 it lost (down CTAs that wait hold
// room that later gate/up waves need; docs/kernels/moe_w4a16.md)
constexpr int kW4SlotSyncMaxRows = 1;

// uint32 words of one expert's repacked [n, k] weight (its slice of the stacked buffer).
inline int64_t moe_w4a16_expert_words(int n, int k) {
  const int64_t tiles = (n + kW4TileRows - 1) / kW4TileRows, chunks = (k + kW4TileCols - 1) / kW4TileCols;
  return tiles * chunks * kW4BlockWords;
}

// Words of MoeW4a16Params::slot_sync: per expert slot two CTA counters (finished gate/up CTAs,
// down CTAs past their wait).
inline int64_t moe_w4a16_slot_sync_words(int experts, int rows) {
  return 2 * static_cast<int64_t>(experts < rows ? experts : rows);
}
// ... and up to this many gate/up CTAs per slot, the most its count word's 16-bit halves hold
// (Kimi's 2048 intermediate features make 64)
constexpr int kW4SlotSyncMaxCtas = 65535;

// Repack one expert's checkpoint tensors into the tile layout (host memory to host memory):
//   weight_packed  int32 [n, k / 8]   (compressed-tensors pack-quantized, docs/int4.md)
//   weight_scale   bf16 bits [n, k / 32]
//   dst            uint32 [moe_w4a16_expert_words(n, k)]
// k must be a multiple of 32 (the group size). Pure function, thread-safe: the loader may
// repack experts on its reader threads before the upload.
KernelResult moe_w4a16_repack(const int32_t* weight_packed, const uint16_t* weight_scale, int n, int k,
                              uint32_t* dst);

// Row-tile widths of the kernel (grouped rows of one expert per pass over its weights).
// kAuto picks from max_rows_per_expert; the others force one (benchmarks and tests).
enum class W4RowTile : int { kAuto = 0, k8 = 8, k16 = 16, k32 = 32 };

// Where the 8-row tile reads x from. kShared copies the pass's x rows into shared memory once
// per CTA (one cp.async batch, next to the weight ring's fill), so the mma loop reads them with
// LDS instead of waiting on an L2 load per 64-column block; kAuto does so when the staged rows
// still leave most of the CTAs per SM (moe_gemm_w4a16.cu), kGlobal never (benchmarks, tests).
// Results do not depend on it. Wider row tiles always read x from global memory.
enum class W4XSource : int { kAuto = 0, kGlobal = 1, kShared = 2 };

struct MoeW4a16Params {
  int experts = 0;
  int rows = 0;                    // grouped rows (tokens * top_k)
  int n = 0, k = 0;                // out features, in features (k % 32 == 0)
  // Most rows any one expert can own (the engine: tokens, as an expert is picked at most
  // once per token); 0 = unknown (rows). Picks the row-tile width; results do not depend on it.
  int max_rows_per_expert = 0;
  W4RowTile row_tile = W4RowTile::kAuto;
  // Slices of the input columns per CTA (its 8 warps = 8 / k_slices row tiles x k_slices
  // slices, partial sums added in slice order): 0 = auto (from k alone, so results never depend
  // on the routing), 1, 2 or 4 force one (benchmarks). Results differ in the last bits between
  // slice counts.
  int k_slices = 0;
  W4XSource x_source = W4XSource::kAuto;
  // Warps per CTA of a 1-slice launch with the 8-row tile: 0 = auto (4 when 8-warp CTAs would fill
  // under two waves of the GPU, for an even spread; else 8), 4 or 8 force one (benchmarks, tests).
  // With 4 slices, 4 forces CTAs of one row tile instead of two (benchmarks). Results do not
  // depend on it.
  int cta_warps = 0;
  // The previous kernel on the stream wrote only x (nothing else this launch reads, and it
  // reads nothing this launch writes): this launch may start before it ends (programmatic
  // dependent launch, sm_90+), find its expert and fill its weight ring, then wait for it
  // before the first x load. The engine sets it on the down GEMM, after the gate/up GEMM.
  bool overlap_previous = false;
  // Optional, on both launches of a gate/up (SwiGLU) + down (plain) pair, the down launched
  // after the gate/up one (with overlap_previous for the hand-off to gain anything), or on
  // neither, with the same experts, rows and max_rows_per_expert on both:
  // [moe_w4a16_slot_sync_words(experts, rows)] words, zero before the pair (the down launch
  // leaves them zero again; no other pair may use them meanwhile). At single-token decode
  // (max_rows_per_expert <= kW4SlotSyncMaxRows; above it both launches ignore it) the gate/up
  // CTAs count themselves done per expert slot once they have stored, and a down CTA waits for
  // its own slot's count instead of the whole gate/up grid (when it stages x; else it waits for
  // the grid): the slots' gate/up CTAs finish in launch order, ~10 us apart at n = 1, so the
  // first slots' down CTAs stream while the last gate/up CTAs finish. Results do not depend on it.
  uint32_t* slot_sync = nullptr;
  const void* x = nullptr;         // bf16; grouped row r reads x row (x_row ? x_row[r] : r)
  int64_t x_stride = 0;            // elements, a multiple of 8 (16-byte row loads); x 16-byte aligned
  const int32_t* x_row = nullptr;  // [rows] or null
  const int32_t* offsets = nullptr;  // [experts + 1] expert e owns rows offsets[e] .. offsets[e+1]-1
  // Optional: [min(experts, rows)] the experts that own rows, in increasing order, then -1
  // (moe_group's active_experts). Each CTA then finds its expert with one load instead of a
  // pass over offsets, a barrier and a scan; results do not depend on it.
  const int32_t* active_experts = nullptr;
  const uint32_t* w = nullptr;     // repacked, expert e at w + e * w_expert_stride (16-byte aligned)
  const uint32_t* w_up = nullptr;  // as w, or null; non-null selects the SwiGLU form
  int64_t w_expert_stride = 0;     // words between experts: >= moe_w4a16_expert_words(n, k), a multiple of 4
  void* out = nullptr;             // bf16 [rows, n] at out + r * out_stride
  int64_t out_stride = 0;
};

// The experts' repacked weights of one projection: expert e's [n, k] at w + e * w_expert_stride.
struct MoeW4a16Weights {
  const uint32_t* w = nullptr;     // repacked (16-byte aligned)
  const uint32_t* w_up = nullptr;  // as w, or null; non-null selects the SwiGLU form
  int64_t w_expert_stride = 0;     // words between experts: >= moe_w4a16_expert_words(n, k), a multiple of 4
  int n = 0, k = 0;                // out features, in features (k % 32 == 0)
};

// The one place MoeW4a16Params are built: `weights` applied to the `in` rows of `rows`, into
// `out`. The tuning knobs (row_tile, k_slices, x_source, cta_warps) keep their defaults
// (automatic), as do overlap_previous and slot_sync: a caller that forces one sets it after.
inline MoeW4a16Params make_moe_w4a16_params(const MoeRoutedRows& rows, const MoeInputRows& in,
                                            const MoeW4a16Weights& weights, const MoeOutputRows& out) {
  MoeW4a16Params p;
  set_moe_gemm_operands(p, rows, in, weights, out);
  p.max_rows_per_expert = rows.max_rows_per_expert;
  p.active_experts = rows.active_experts;
  return p;
}

// plain:  out[r] = bf16(x[r] W_e^T)
// SwiGLU: out[r] = bf16(bf16(silu(bf16(x[r] W_e^T))) * bf16(x[r] U_e^T))   (as moe_gemm rounds)
KernelResult moe_gemm_w4a16(const MoeW4a16Params& p, cudaStream_t stream);

inline KernelResult check_moe_w4a16_params(const MoeW4a16Params& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.experts < 1 || p.rows < 0 || p.n < 1 || p.k < 1)
    return KernelResult::invalid("moe_gemm_w4a16: experts, n, k must be >= 1 and rows >= 0");
  if (p.k % kW4GroupSize)
    return KernelResult::invalid("moe_gemm_w4a16: k " + s(p.k) + " is not a multiple of the group size " +
                                 s(kW4GroupSize));
  if (p.x_stride < p.k || p.x_stride % 8 || p.out_stride < p.n)
    return KernelResult::invalid("moe_gemm_w4a16: x_stride must be >= k " + s(p.k) +
                                 " and a multiple of 8, out_stride >= n " + s(p.n));
  if (p.w_expert_stride < moe_w4a16_expert_words(p.n, p.k) || p.w_expert_stride % 4)
    return KernelResult::invalid("moe_gemm_w4a16: w_expert_stride " + s(p.w_expert_stride) +
                                 " must be a multiple of 4 and >= " + s(moe_w4a16_expert_words(p.n, p.k)) +
                                 " words (moe_w4a16_expert_words(n, k))");
  if (p.rows > 0 && (!p.x || !p.offsets || !p.w || !p.out))
    return KernelResult::invalid("moe_gemm_w4a16: x, offsets, w and out must be non-null");
  auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.x) || misaligned(p.w) || misaligned(p.w_up))
    return KernelResult::invalid("moe_gemm_w4a16: x, w and w_up must be 16-byte aligned");
  const int t = static_cast<int>(p.row_tile);
  if (t != 0 && t != 8 && t != 16 && t != 32)
    return KernelResult::invalid("moe_gemm_w4a16: row_tile " + s(t) + " is not one of 0 (auto), 8, 16, 32");
  if (p.k_slices != 0 && p.k_slices != 1 && p.k_slices != 2 && p.k_slices != 4)
    return KernelResult::invalid("moe_gemm_w4a16: k_slices " + s(p.k_slices) + " is not one of 0 (auto), 1, 2, 4");
  const int xs = static_cast<int>(p.x_source);
  if (xs < 0 || xs > 2)
    return KernelResult::invalid("moe_gemm_w4a16: x_source " + s(xs) + " is not one of 0 (auto), 1 (global), 2 (shared)");
  if (p.cta_warps != 0 && p.cta_warps != 4 && p.cta_warps != 8)
    return KernelResult::invalid("moe_gemm_w4a16: cta_warps " + s(p.cta_warps) + " is not one of 0 (auto), 4, 8");
  return KernelResult::success();
}

}  // namespace kdtree
