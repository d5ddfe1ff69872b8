// The float32 verify_attn kernel: plain CUDA-core arithmetic, kept simple; it exists to
// prove the bf16 one (<= 1e-5 relative error against the float64 reference).
//
// A CTA takes 16 query rows (8 where a block gets less than ~111 KB of shared memory: the
// sm_120 form, config 13) and one split of the keys (splits are short: <= 4096 keys, so the
// running sums stay accurate). Per 32-key tile in shared memory: each thread computes a score
// per row of its warp (rows w, w + 8, ...; key = lane) as 576-long dot products; a warp per
// row pair does the online softmax; each thread owns two output columns of every row for
// O += P V. Each row's arithmetic, in order, is the same in both forms: their outputs agree
// bit for bit under the same split.
#pragma once

#include "verify_attn_common.cuh"
#include "verify_attn_plan.h"

namespace kdtree::kern {

template <int Rows>
struct F32AttnTile {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / kWarpSize;
  static constexpr int kTileRows = Rows;
  static constexpr int kRowsPerWarp = Rows / kWarps;  // rows w, w + kWarps, ...
  static constexpr int kTileKeys = 32;
  static constexpr int kRowStride = kVerifyQKDim + 4;  // floats; the pad spreads rows over banks
  static constexpr int kMaxSplitLen = 4096;
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + sizeof(float) * kTileRows * kRowStride;
  static constexpr size_t kPOff = kKOff + sizeof(float) * kTileKeys * kRowStride;  // [rows][keys]
  static constexpr size_t kStatOff = kPOff + sizeof(float) * kTileRows * kTileKeys;  // alpha [rows]
  static constexpr size_t kMaskOff = kStatOff + sizeof(float) * kTileRows;
  static constexpr size_t kSmemBytes = kMaskOff + 16;
  static_assert(kThreads * 2 == kVerifyLatentDim, "each thread owns columns c and c + 256");
  static_assert(kRowsPerWarp >= 1 && kRowsPerWarp * kWarps == Rows, "whole rows a warp");
  static_assert(kTileKeys == kWarpSize, "a lane a key");
  static_assert(kPOff + sizeof(float) * 2 * kTileRows <= kMaskOff, "the row statistics reuse P");
};
using F32Attn = F32AttnTile<16>;       // config 2
using F32AttnNarrow = F32AttnTile<8>;  // config 13
static_assert(verify_config_describes<F32Attn>(kVerifyF32), "verify_attn_configs.h must describe F32Attn");
static_assert(verify_config_describes<F32AttnNarrow>(kVerifyF32Narrow),
              "verify_attn_configs.h must describe F32AttnNarrow");

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) verify_attn_f32_kernel(const VerifyKernelParams k) {
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  KD_DYNAMIC_SMEM(uint8_t, smem);
  float* q_s = reinterpret_cast<float*>(smem + Cfg::kQOff);
  float* k_s = reinterpret_cast<float*>(smem + Cfg::kKOff);
  float* p_s = reinterpret_cast<float*>(smem + Cfg::kPOff);
  float* alpha_s = reinterpret_cast<float*>(smem + Cfg::kStatOff);
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);
  constexpr int R = Cfg::kTileRows, N = Cfg::kTileKeys, S = Cfg::kRowStride, RW = Cfg::kRowsPerWarp;
  constexpr int W = Cfg::kWarps;

  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  const SplitSchedule sched = split_schedule(k, R, N, mask_s);
  const SplitWork& w = sched.w;
  const uint32_t tail_mask = sched.tail_mask;
  const int n_tiles = sched.n_tiles, prefix_tiles = sched.prefix_tiles;
  const int H = k.p.heads, T = k.p.tree_len;
  const int64_t lse_base = part_row0(k, w.b, w.split);  // split_group is 1 here: a partial a split

  if (n_tiles == 0) {
    write_empty_split(k, w, R);
    return;
  }

  // the query tile, rows past M zero
  const float* q_lat = static_cast<const float*>(k.p.q_lat);
  const float* q_pe = static_cast<const float*>(k.p.q_pe);
  for (int idx = tid; idx < R * (kVerifyQKDim / 4); idx += Cfg::kThreads) {
    const int r = idx / (kVerifyQKDim / 4), c4 = idx % (kVerifyQKDim / 4);
    const int m = w.row0 + r;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (m < k.rows) {
      const int64_t row = static_cast<int64_t>(w.b) * k.rows + m;
      v = c4 < kVerifyLatentDim / 4 ? reinterpret_cast<const float4*>(q_lat + row * kVerifyLatentDim)[c4]
                                    : reinterpret_cast<const float4*>(q_pe + row * kVerifyRopeDim)[c4 - kVerifyLatentDim / 4];
    }
    *reinterpret_cast<float4*>(q_s + r * S + 4 * c4) = v;
  }

  // softmax state of rows warp, warp + W, ... (lane 0 of the warp is authoritative)
  float m_run[RW], l_run[RW];
#pragma unroll
  for (int h = 0; h < RW; ++h) {
    m_run[h] = -INFINITY;
    l_run[h] = 0.0f;
  }
  float o[R][2];  // this thread's columns tid and tid + 256
#pragma unroll
  for (int r = 0; r < R; ++r) o[r][0] = o[r][1] = 0.0f;
  const float* kv = static_cast<const float*>(k.p.kv) + static_cast<int64_t>(w.b) * k.p.kv_batch_stride;

  for (int it = 0; it < n_tiles; ++it) {
    const KeyTile tile = key_tile_at(w, prefix_tiles, tail_mask, it, N, T);
    __syncthreads();  // the previous tile is no longer read
    for (int idx = tid; idx < N * (kVerifyQKDim / 4); idx += Cfg::kThreads) {
      const int r = idx / (kVerifyQKDim / 4), c4 = idx % (kVerifyQKDim / 4);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < tile.valid) v = reinterpret_cast<const float4*>(kv + (static_cast<int64_t>(tile.key0) + r) * k.p.kv_row_stride)[c4];
      *reinterpret_cast<float4*>(k_s + r * S + 4 * c4) = v;
    }
    __syncthreads();

    // scores of rows warp, warp + W, ... against key `lane`
    {
      const float* kr = k_s + lane * S;
      float sc[RW];
#pragma unroll
      for (int h = 0; h < RW; ++h) sc[h] = 0.0f;
      for (int d = 0; d < kVerifyQKDim; d += 4) {
        const float4 kk = *reinterpret_cast<const float4*>(kr + d);
#pragma unroll
        for (int h = 0; h < RW; ++h) {
          const float4 a = *reinterpret_cast<const float4*>(q_s + (warp + W * h) * S + d);
          sc[h] += a.x * kk.x + a.y * kk.y + a.z * kk.z + a.w * kk.w;
        }
      }
      bool ok = lane < tile.valid;
#pragma unroll
      for (int h = 0; h < RW; ++h) sc[h] *= k.scale_log2;
#pragma unroll
      for (int h = 0; h < RW; ++h) {
        const int r = warp + W * h;
        bool vis_ok = ok;
        if (tile.tail_tile >= 0 && ok) {
          const int m = min(w.row0 + r, k.rows - 1);
          const int tk = tile.tail_tile * N + lane;
          const uint32_t word = k.p.vis[(static_cast<int64_t>(w.b) * T + m / H) * k.p.vis_words + (tk >> 5)];
          vis_ok = (word >> (tk & 31)) & 1u;
        }
        float v = vis_ok ? sc[h] : -INFINITY;
        float mx = v;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, d));
        const float m_new = fmaxf(m_run[h], mx);
        const float alpha = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m_new);
        const float p = exp2f(v - (m_new == -INFINITY ? 0.0f : m_new));
        float sum = p;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(kFullMask, sum, d);
        l_run[h] = l_run[h] * alpha + sum;
        m_run[h] = m_new;
        p_s[r * N + lane] = p;
        if (lane == 0) alpha_s[r] = alpha;
      }
    }
    __syncthreads();

    // O += P V: columns tid and tid + 256 of every row
#pragma unroll
    for (int r = 0; r < R; ++r) {
      o[r][0] *= alpha_s[r];
      o[r][1] *= alpha_s[r];
    }
    for (int j = 0; j < N; ++j) {
      const float v0 = k_s[j * S + tid], v1 = k_s[j * S + tid + 256];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float p = p_s[r * N + j];
        o[r][0] += p * v0;
        o[r][1] += p * v1;
      }
    }
  }

  // row statistics to shared memory (lane 0 of warp w holds rows w, w + W, ...)
  __syncthreads();
  float* l_s = p_s;          // reuse: [R] sums
  float* m_s = p_s + R;      // [R] maxima (base 2)
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < RW; ++h) {
      l_s[warp + W * h] = l_run[h];
      m_s[warp + W * h] = m_run[h];
    }
  }
  __syncthreads();
  for (int r = 0; r < R; ++r) {
    const int m = w.row0 + r;
    if (m >= k.rows) break;
    const float l = l_s[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float lse2 = l > 0.0f ? m_s[r] + log2f(l) : -INFINITY;
    if (k.parts == 1) {
      float* out = static_cast<float*>(k.p.out) + (static_cast<int64_t>(w.b) * k.rows + m) * kVerifyLatentDim;
      out[tid] = o[r][0] * inv;
      out[tid + 256] = o[r][1] * inv;
      if (tid == 0 && k.p.lse) k.p.lse[static_cast<int64_t>(w.b) * k.rows + m] = natural_lse(lse2);
    } else {
      float* out = k.part_o + (lse_base + m) * kVerifyLatentDim;
      out[tid] = o[r][0] * inv;
      out[tid + 256] = o[r][1] * inv;
      if (tid == 0) k.part_lse[lse_base + m] = lse2;
    }
  }
}

}  // namespace kdtree::kern
