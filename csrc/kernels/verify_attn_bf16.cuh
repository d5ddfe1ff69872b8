// The bf16 verify_attn kernel: tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate).
//
// A CTA takes kTileRows query rows (t, h) of one request and one split of its keys. The
// rows are the M dimension of Q K^T against the shared latent rows (K dim 576), and the same
// rows' first 512 columns are V. Per key tile (kTileKeys rows of the cache in shared memory,
// cp.async, double-buffered on sm_90):
//   S = Q K^T           warp (rg, cg): 16 rows x kKeysPerWarp keys, 36 k-steps of 16
//   mask, scale         prefix tail beyond the split, tree keys by the ancestor bits
//   online softmax      row max shared across the CG warps of a row group through smem
//   P (bf16) -> smem, O += P V   warp (prg, pcg): kPRowsPerWarp rows x kColsPerWarp columns
// Shared-memory tiles are XOR-swizzled by 16-byte chunk so ldmatrix is conflict-free.
// P V may use fewer warps along the rows than S (PRowGroups < RowGroups): each warp then
// owns more rows and fewer columns, so every V fragment it loads feeds more MMAs (the 64 x 64
// tile: 2 x 4 instead of 4 x 2 reads V from shared memory twice instead of four times, -16%
// of the tile's shared-memory reads). Its O rows are not its S rows, so every warp tracks
// the rescaling of its O rows from shared memory (the S warps of column group 0 write it
// before the barrier that publishes P; the final maxima go to red_max after the loop).
#pragma once

#include "ptx_mma.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_plan.h"

namespace kdtree::kern {

template <int RowGroups, int ColGroups, int TileKeys, int Stages, int PRowGroups>
struct Bf16AttnConfig {
  static constexpr int kRowGroups = RowGroups;  // S: warps along the rows (16 rows each)
  static constexpr int kColGroups = ColGroups;  // S: warps sharing a row group (split keys)
  static constexpr int kWarps = RowGroups * ColGroups;
  static constexpr int kPRowGroups = PRowGroups;           // P V: warps along the rows
  static constexpr int kPColGroups = kWarps / PRowGroups;  // P V: warps along the 512 columns
  static constexpr int kPRowsPerWarp = 16 * RowGroups / PRowGroups;  // O rows of one warp
  static constexpr int kPM = kPRowsPerWarp / 16;                     // its m16 row tiles
  static constexpr bool kSameRows = PRowGroups == RowGroups;         // O rows == S rows
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kTileRows = 16 * RowGroups;
  static constexpr int kTileKeys = TileKeys;
  static constexpr int kStages = Stages;                       // K tiles in flight
  static constexpr int kKeysPerWarp = TileKeys / ColGroups;    // S columns of one warp
  static constexpr int kSTiles = kKeysPerWarp / 8;             // its n8 tiles
  static constexpr int kColsPerWarp = kVerifyLatentDim / kPColGroups;  // O columns of one warp
  static constexpr int kOTiles = kColsPerWarp / 8;
  static constexpr int kChunks = kVerifyQKDim / 8;             // 72 16-byte chunks per row
  static constexpr int kPChunks = TileKeys / 8;                // chunks per P row
  static_assert(kKeysPerWarp % 8 == 0 && (kSTiles == 1 || kSTiles % 2 == 0), "S tiles come in pairs (or one)");
  static_assert(kOTiles % 2 == 0, "O tiles come in pairs");
  static_assert(kWarps % PRowGroups == 0 && RowGroups % PRowGroups == 0, "P V warps tile the rows evenly");
  static_assert(TileKeys % 16 == 0 && 64 % TileKeys == 0, "key tiles divide the 64-key mask tiles");
  static_assert(kPChunks == 4 || kPChunks % 8 == 0, "P rows swizzle in groups of 4 or 8 chunks");

  // shared-memory layout (bytes)
  static constexpr size_t kRowBytes = kVerifyQKDim * 2;
  static constexpr size_t kQBytes = kTileRows * kRowBytes;
  static constexpr size_t kKBytes = static_cast<size_t>(TileKeys) * kRowBytes;
  static constexpr size_t kPBytes = static_cast<size_t>(kTileRows) * TileKeys * 2;
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + kQBytes;
  static constexpr size_t kPOff = kKOff + kStages * kKBytes;
  static constexpr size_t kMaxOff = kPOff + kPBytes;                       // float [CG][rows]
  static constexpr size_t kSumOff = kMaxOff + sizeof(float) * ColGroups * kTileRows;
  static constexpr size_t kAlphaOff = kSumOff + sizeof(float) * ColGroups * kTileRows;  // float [rows]
  static constexpr size_t kMaskOff = kAlphaOff + (kSameRows ? 0 : sizeof(float) * kTileRows);
  static constexpr size_t kSmemBytes = kMaskOff + 16;
};

// 64 x 64 tiles, 8 warps, ~225 KB: H100/H200. S 4 x 2 warps (16 rows x 32 keys), P V 2 x 4
// (32 rows x 128 columns).
using Bf16AttnSm90 = Bf16AttnConfig<4, 2, 64, 2, 2>;
// The same tile with P V in the S layout (16 rows x 256 columns): the kernel before the 2 x 4
// P V, kept selectable (force_config, bench `config=5`) to time one against the other.
using Bf16AttnSm90SameRows = Bf16AttnConfig<4, 2, 64, 2, 4>;
// ... and with P V 1 x 8 (64 rows x 64 columns: V read once, P eight times), also selectable.
using Bf16AttnSm90PvRows64 = Bf16AttnConfig<4, 2, 64, 2, 1>;
// 32 x 32 tiles, 8 warps, ~75 KB: sm_120, sm_89. S 2 x 4 (16 rows x 8 keys), P V 1 x 8
// (32 rows x 64 columns).
using Bf16AttnSmall = Bf16AttnConfig<2, 4, 32, 1, 1>;
static_assert(Bf16AttnSm90::kSmemBytes == kVerifyConfigShapes[kVerifyBf16Sm90].smem_bytes &&
                  Bf16AttnSm90::kTileRows == kVerifyConfigShapes[kVerifyBf16Sm90].tile_rows &&
                  Bf16AttnSm90::kTileKeys == kVerifyConfigShapes[kVerifyBf16Sm90].tile_keys,
              "verify_attn_plan.h must describe Bf16AttnSm90");
static_assert(Bf16AttnSm90SameRows::kSmemBytes == kVerifyConfigShapes[kVerifyBf16Sm90SameRows].smem_bytes &&
                  Bf16AttnSm90SameRows::kTileRows == kVerifyConfigShapes[kVerifyBf16Sm90SameRows].tile_rows &&
                  Bf16AttnSm90SameRows::kTileKeys == kVerifyConfigShapes[kVerifyBf16Sm90SameRows].tile_keys,
              "verify_attn_plan.h must describe Bf16AttnSm90SameRows");
static_assert(Bf16AttnSm90PvRows64::kSmemBytes == kVerifyConfigShapes[kVerifyBf16Sm90PvRows64].smem_bytes &&
                  Bf16AttnSm90PvRows64::kTileRows == kVerifyConfigShapes[kVerifyBf16Sm90PvRows64].tile_rows &&
                  Bf16AttnSm90PvRows64::kTileKeys == kVerifyConfigShapes[kVerifyBf16Sm90PvRows64].tile_keys,
              "verify_attn_plan.h must describe Bf16AttnSm90PvRows64");
static_assert(Bf16AttnSmall::kSmemBytes == kVerifyConfigShapes[kVerifyBf16Small].smem_bytes &&
                  Bf16AttnSmall::kTileRows == kVerifyConfigShapes[kVerifyBf16Small].tile_rows &&
                  Bf16AttnSmall::kTileKeys == kVerifyConfigShapes[kVerifyBf16Small].tile_keys,
              "verify_attn_plan.h must describe Bf16AttnSmall");

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled [rows][72 chunks] tile.
KD_DEVICE uint32_t qk_offset(int r, int c) {
  return static_cast<uint32_t>(r * (kVerifyQKDim * 2) + ((c ^ (r & 7)) << 4));
}
// ... and in a swizzled P tile of `chunks` chunks per row (4 or a multiple of 8).
template <int Chunks>
KD_DEVICE uint32_t p_offset(int r, int c) {
  const int phys = Chunks >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
  return static_cast<uint32_t>(r * (Chunks * 16) + (phys << 4));
}

// Issue cp.async copies of `rows` cache rows starting at `key0` (rows >= valid zero-filled).
template <class Cfg>
KD_DEVICE void load_key_tile(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, int key0, int valid) {
  for (int idx = static_cast<int>(threadIdx.x); idx < Cfg::kTileKeys * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks, c = idx - r * Cfg::kChunks;
    const bool ok = r < valid;
    const __nv_bfloat16* src = ok ? kv + (static_cast<int64_t>(key0) + r) * row_stride + c * 8 : kv;
    cp_async_16(dst + qk_offset(r, c), src, ok);
  }
}

template <class Cfg>
KD_DEVICE void load_query_tile(uint8_t* dst, const VerifyKernelParams& k, int b, int row0) {
  const __nv_bfloat16* q_lat = static_cast<const __nv_bfloat16*>(k.p.q_lat);
  const __nv_bfloat16* q_pe = static_cast<const __nv_bfloat16*>(k.p.q_pe);
  for (int idx = static_cast<int>(threadIdx.x); idx < Cfg::kTileRows * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks, c = idx - r * Cfg::kChunks;
    const int m = row0 + r;
    const bool ok = m < k.rows;
    const int64_t row = static_cast<int64_t>(b) * k.rows + m;
    const __nv_bfloat16* src = !ok ? q_lat
                               : c < kVerifyLatentDim / 8 ? q_lat + row * kVerifyLatentDim + c * 8
                                                          : q_pe + row * kVerifyRopeDim + (c - kVerifyLatentDim / 8) * 8;
    cp_async_16(dst + qk_offset(r, c), src, ok);
  }
}

template <class Cfg, class OutT>
__global__ void __launch_bounds__(Cfg::kThreads, 1) verify_attn_bf16_kernel(const VerifyKernelParams k) {
  KD_DYNAMIC_SMEM(uint8_t, smem);
  uint8_t* q_s = smem + Cfg::kQOff;
  uint8_t* p_s = smem + Cfg::kPOff;
  float* red_max = reinterpret_cast<float*>(smem + Cfg::kMaxOff);  // [CG][rows]
  float* red_sum = reinterpret_cast<float*>(smem + Cfg::kSumOff);  // [CG][rows]
  float* red_alpha = reinterpret_cast<float*>(smem + Cfg::kAlphaOff);  // [rows] (P V rows != S rows)
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int rg = warp % Cfg::kRowGroups, cg = warp / Cfg::kRowGroups;        // S
  const int prg = warp % Cfg::kPRowGroups, pcg = warp / Cfg::kPRowGroups;    // P V
  const int g = lane / 4, tig = lane % 4;  // fragment row / column pair
  const SplitWork w = split_work(k, Cfg::kTileRows);
  const uint32_t tail_mask = w.tail ? active_tail_tiles(k, w, Cfg::kTileRows, mask_s) : 0u;
  const int n_tiles = schedule_length(w, tail_mask, Cfg::kTileKeys);
  const int prefix_tiles = (w.key_end - w.key_begin + Cfg::kTileKeys - 1) / Cfg::kTileKeys;
  const int H = k.p.heads, T = k.p.tree_len;

  // this thread's two fragment rows (lo: g, hi: g + 8 of the warp's 16)
  const int r_lo = 16 * rg + g, r_hi = r_lo + 8;
  const int m_lo = w.row0 + r_lo, m_hi = w.row0 + r_hi;
  // the fragment rows' visibility rows, as 32-bit word offsets into vis (offsets, not
  // pointers: fewer registers in a kernel at the register limit; the launcher checks that
  // B * T * vis_words fits)
  const int vis_lo = (w.b * T + min(m_lo, k.rows - 1) / H) * k.p.vis_words;
  const int vis_hi = (w.b * T + min(m_hi, k.rows - 1) / H) * k.p.vis_words;

  if (n_tiles == 0) {  // an empty prefix split (a shorter request): nothing visible
    if (cg == 0 && tig == 0) {
      const int64_t base = (static_cast<int64_t>(w.b) * k.splits + w.split) * k.rows;
      if (m_lo < k.rows) k.part_lse[base + m_lo] = -INFINITY;
      if (m_hi < k.rows) k.part_lse[base + m_hi] = -INFINITY;
    }
    return;
  }

  const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(k.p.kv) + static_cast<int64_t>(w.b) * k.p.kv_batch_stride;
  // O rows of this thread: tile row o_row0 + 16 i + g + 8 h for m16 tile i, half h
  const int o_row0 = prg * Cfg::kPRowsPerWarp;
  float o[Cfg::kPM][Cfg::kOTiles][4];
#pragma unroll
  for (int i = 0; i < Cfg::kPM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kOTiles; ++j) o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // S rows lo, hi (base 2)

  load_query_tile<Cfg>(q_s, k, w.b, w.row0);
  {
    const KeyTile t0 = key_tile_at(w, prefix_tiles, tail_mask, 0, Cfg::kTileKeys, T);
    load_key_tile<Cfg>(smem + Cfg::kKOff, kv, k.p.kv_row_stride, t0.key0, t0.valid);
  }
  cp_async_commit();

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = Cfg::kStages == 2 ? (it & 1) : 0;
    uint8_t* k_s = smem + Cfg::kKOff + buf * Cfg::kKBytes;
    const KeyTile tile = key_tile_at(w, prefix_tiles, tail_mask, it, Cfg::kTileKeys, T);
    cp_async_wait<0>();
    __syncthreads();  // tile `it` (and Q) landed for everyone; everyone is done with tile it-1
    if (Cfg::kStages == 2 && it + 1 < n_tiles) {
      const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
      load_key_tile<Cfg>(smem + Cfg::kKOff + ((it + 1) & 1) * Cfg::kKBytes, kv, k.p.kv_row_stride, nx.key0, nx.valid);
      cp_async_commit();
    }

    // S = Q K^T for this warp's 16 rows x kKeysPerWarp keys
    float s[Cfg::kSTiles][4];
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const int key_base = cg * Cfg::kKeysPerWarp;
#pragma unroll 4
    for (int kk = 0; kk < kVerifyQKDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_s + qk_offset(16 * rg + lane % 16, 2 * kk + lane / 16));
      if constexpr (Cfg::kSTiles == 1) {
        uint32_t bq[4];
        ldmatrix_x4(bq, k_s + qk_offset(key_base + lane % 8, 2 * kk + (lane / 8) % 2));  // lanes 16..31 repeat
        mma_bf16_16816(s[0], a, bq[0], bq[1]);
      } else {
#pragma unroll
        for (int np = 0; np < Cfg::kSTiles / 2; ++np) {
          uint32_t bq[4];
          ldmatrix_x4(bq, k_s + qk_offset(key_base + 16 * np + lane % 8 + 8 * (lane / 16), 2 * kk + (lane / 8) % 2));
          mma_bf16_16816(s[2 * np], a, bq[0], bq[1]);
          mma_bf16_16816(s[2 * np + 1], a, bq[2], bq[3]);
        }
      }
    }

    // scale into the base-2 domain and mask; row maxima of this warp's keys
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_base + 8 * j + 2 * tig + (e & 1);
        bool ok = key < tile.valid;
        if (tile.tail_tile >= 0 && ok) {
          const int tk = tile.tail_tile * Cfg::kTileKeys + key;
          const uint32_t word = k.p.vis[(e < 2 ? vis_lo : vis_hi) + (tk >> 5)];
          ok = (word >> (tk & 31)) & 1u;
        }
        s[j][e] = ok ? s[j][e] * k.scale_log2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 2));
    }
    if (tig == 0) {
      red_max[cg * Cfg::kTileRows + r_lo] = mx[0];
      red_max[cg * Cfg::kTileRows + r_hi] = mx[1];
    }
    __syncthreads();
    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? r_lo : r_hi;
      float m_tile = red_max[r];
#pragma unroll
      for (int c = 1; c < Cfg::kColGroups; ++c) m_tile = fmaxf(m_tile, red_max[c * Cfg::kTileRows + r]);
      const float m_new = fmaxf(m_run[h], m_tile);
      alpha[h] = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m_new);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0, no NaN
      m_run[h] = m_new;
    }
    float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - m_use[e >> 1]);
        rowsum[e >> 1] += s[j][e];
      }
      const int key = key_base + 8 * j + 2 * tig;
      *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(r_lo, key / 8) + (key % 8) * 2) = pack_bf16x2(s[j][0], s[j][1]);
      *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(r_hi, key / 8) + (key % 8) * 2) = pack_bf16x2(s[j][2], s[j][3]);
    }
    l_run[0] = l_run[0] * alpha[0] + rowsum[0];
    l_run[1] = l_run[1] * alpha[1] + rowsum[1];
    if constexpr (Cfg::kSameRows) {
#pragma unroll
      for (int j = 0; j < Cfg::kOTiles; ++j) {
        o[0][j][0] *= alpha[0];
        o[0][j][1] *= alpha[0];
        o[0][j][2] *= alpha[1];
        o[0][j][3] *= alpha[1];
      }
    } else if (cg == 0 && tig == 0) {  // published by the barrier below; rewritten after the next tile's first
      red_alpha[r_lo] = alpha[0];
      red_alpha[r_hi] = alpha[1];
    }
    __syncthreads();  // P complete
    if constexpr (!Cfg::kSameRows) {
#pragma unroll
      for (int i = 0; i < Cfg::kPM; ++i) {
        const float a_lo = red_alpha[o_row0 + 16 * i + g], a_hi = red_alpha[o_row0 + 16 * i + g + 8];
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j) {
          o[i][j][0] *= a_lo;
          o[i][j][1] *= a_lo;
          o[i][j][2] *= a_hi;
          o[i][j][3] *= a_hi;
        }
      }
    }

    // O += P V for this warp's kPRowsPerWarp rows x kColsPerWarp columns
    const int col_base = pcg * Cfg::kColsPerWarp;
#pragma unroll
    for (int ks = 0; ks < Cfg::kTileKeys / 16; ++ks) {
      uint32_t a[Cfg::kPM][4];
#pragma unroll
      for (int i = 0; i < Cfg::kPM; ++i)
        ldmatrix_x4(a[i], p_s + p_offset<Cfg::kPChunks>(o_row0 + 16 * i + lane % 16, 2 * ks + lane / 16));
#pragma unroll
      for (int np = 0; np < Cfg::kOTiles / 2; ++np) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, k_s + qk_offset(16 * ks + lane % 8 + 8 * ((lane / 8) % 2), (col_base + 16 * np) / 8 + lane / 16));
#pragma unroll
        for (int i = 0; i < Cfg::kPM; ++i) {
          mma_bf16_16816(o[i][2 * np], a[i], bv[0], bv[1]);
          mma_bf16_16816(o[i][2 * np + 1], a[i], bv[2], bv[3]);
        }
      }
    }
    if (Cfg::kStages == 1 && it + 1 < n_tiles) {
      __syncthreads();  // everyone is done with the single K buffer
      const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
      load_key_tile<Cfg>(smem + Cfg::kKOff, kv, k.p.kv_row_stride, nx.key0, nx.valid);
      cp_async_commit();
    }
  }

  // the row sums across the warp's quad and the row group's warps
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(kFullMask, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(kFullMask, l_run[h], 2);
  }
  if (tig == 0) {
    red_sum[cg * Cfg::kTileRows + r_lo] = l_run[0];
    red_sum[cg * Cfg::kTileRows + r_hi] = l_run[1];
    if (!Cfg::kSameRows && cg == 0) {  // the final maxima for the O warps (red_max is no longer read)
      red_max[r_lo] = m_run[0];
      red_max[r_hi] = m_run[1];
    }
  }
  __syncthreads();
  const int col_base = pcg * Cfg::kColsPerWarp;
  const int64_t part_base = (static_cast<int64_t>(w.b) * k.splits + w.split) * k.rows;
#pragma unroll
  for (int i = 0; i < Cfg::kPM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = o_row0 + 16 * i + g + 8 * h, m = w.row0 + r;
      if (m >= k.rows) continue;
      float l = 0.0f;
#pragma unroll
      for (int c = 0; c < Cfg::kColGroups; ++c) l += red_sum[c * Cfg::kTileRows + r];
      const float m_row = Cfg::kSameRows ? m_run[h] : red_max[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse2 = l > 0.0f ? m_row + log2f(l) : -INFINITY;
      if (k.splits == 1) {
        OutT* row = static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(w.b) * k.rows + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j) {
          const float x0 = o[i][j][2 * h] * inv, x1 = o[i][j][2 * h + 1] * inv;
          if constexpr (sizeof(OutT) == 4) {
            *reinterpret_cast<float2*>(row + 8 * j) = make_float2(x0, x1);
          } else {
            *reinterpret_cast<__nv_bfloat162*>(row + 8 * j) = __floats2bfloat162_rn(x0, x1);
          }
        }
        if (pcg == 0 && tig == 0 && k.p.lse)
          k.p.lse[static_cast<int64_t>(w.b) * k.rows + m] = lse2 == -INFINITY ? -INFINITY : lse2 / kLog2e;
      } else {
        float* row = k.part_o + (part_base + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j)
          *reinterpret_cast<float2*>(row + 8 * j) = make_float2(o[i][j][2 * h] * inv, o[i][j][2 * h + 1] * inv);
        if (pcg == 0 && tig == 0) k.part_lse[part_base + m] = lse2;
      }
    }
}

}  // namespace kdtree::kern
