// The mma tile of the bf16 verify_attn kernel: tensor cores (mma.sync m16n8k16, bf16 in, f32
// accumulate), any number of query rows.
//
// A CTA takes kTileRows query rows (t, h) of one request and one split of its keys. The
// rows are the M dimension of Q K^T against the shared latent rows (K dim 576), and the same
// rows' first 512 columns are V. Per key tile (kTileKeys rows of the cache in shared memory,
// cp.async, double-buffered on sm_90):
//   S = Q K^T           S warp (srg, scg): kSRowsPerWarp rows x kKeysPerWarp keys, 36 k-steps
//   mask, scale         prefix tail beyond the split, tree keys by the ancestor bits
//   online softmax      row max shared across the kSColGroups warps of a row group (smem)
//   P (bf16) -> smem, O += P V   warp (prg, pcg): kPRowsPerWarp rows x kColsPerWarp columns
// Shared-memory tiles are XOR-swizzled by 16-byte chunk so ldmatrix is conflict-free.
//
// The kernel is bound by shared-memory reads (ldmatrix, 128 B/clk/SM), so the warp tiles are
// as large as the registers allow. P V: the 64 x 64 tile's 2 x 4 layout (32 rows x 128
// columns a warp) reads V twice per tile where 4 x 2 read it four times. S: with
// kSWarps < kWarps only the first kSWarps warps compute S, each on a larger tile (64 x 64:
// 4 warps of 32 rows x 32 keys read Q and K twice each, where 8 warps of 16 x 32 read Q twice
// and K four times); the other warps issue the next tile's copies meanwhile. When a warp's
// O rows are not its S rows it rescales O from shared memory (red_alpha, written by the S
// warps of column group 0 before the barrier that publishes P; the final maxima go to
// red_max after the loop).
//
// A baseline (csrc/dev/verify_attn_baselines.h: configs 0 and 1), no device's plan picks it: the
// seesaw tile took > 32 rows on sm_90a, the two-stage narrow decode tile every shape on sm_120.
#pragma once

#include "kernels/verify_attn_bf16.cuh"

namespace kdtree::kern {

template <int TileRows, int TileKeys, int Stages, int SRowGroups, int SColGroups, int PRowGroups>
struct Bf16AttnConfig {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kTileRows = TileRows;
  static constexpr int kTileKeys = TileKeys;
  static constexpr int kStages = Stages;                          // K tiles in flight
  // S = Q K^T: warps w < kSWarps, (srg, scg) = (w % kSRowGroups, w / kSRowGroups)
  static constexpr int kSRowGroups = SRowGroups;
  static constexpr int kSColGroups = SColGroups;
  static constexpr int kSWarps = SRowGroups * SColGroups;
  static constexpr int kSRowsPerWarp = TileRows / SRowGroups;
  static constexpr int kSM = kSRowsPerWarp / 16;                  // m16 row tiles of an S warp
  static constexpr int kKeysPerWarp = TileKeys / SColGroups;      // S columns of one warp
  static constexpr int kSTiles = kKeysPerWarp / 8;                // its n8 tiles
  // O += P V: every warp, (prg, pcg) = (w % kPRowGroups, w / kPRowGroups)
  static constexpr int kPRowGroups = PRowGroups;
  static constexpr int kPColGroups = kWarps / PRowGroups;
  static constexpr int kPRowsPerWarp = TileRows / PRowGroups;
  static constexpr int kPM = kPRowsPerWarp / 16;                  // m16 row tiles of a P V warp
  static constexpr int kColsPerWarp = kVerifyLatentDim / kPColGroups;  // O columns of one warp
  static constexpr int kOTiles = kColsPerWarp / 8;
  // a warp's O rows are its S rows: the rescaling stays in registers
  static constexpr bool kSameRows = kSWarps == kWarps && SRowGroups == PRowGroups;
  static constexpr int kChunks = kVerifyQKDim / 8;                // 72 16-byte chunks per row
  static constexpr int kPChunks = TileKeys / 8;                   // chunks per P row
  static_assert(kSRowsPerWarp % 16 == 0 && kPRowsPerWarp % 16 == 0, "warps own whole m16 row tiles");
  static_assert(kSWarps <= kWarps && kWarps % PRowGroups == 0, "warp layouts fit the CTA");
  static_assert(kKeysPerWarp % 8 == 0 && (kSTiles == 1 || kSTiles % 2 == 0), "S tiles come in pairs (or one)");
  static_assert(kOTiles % 2 == 0, "O tiles come in pairs");
  static_assert(TileKeys % 16 == 0 && 64 % TileKeys == 0, "key tiles divide the 64-key mask tiles");
  static_assert(kPChunks == 4 || kPChunks % 8 == 0, "P rows swizzle in groups of 4 or 8 chunks");
  static_assert(TileRows <= kThreads, "one thread per row for the empty-split lse");

  // shared-memory layout (bytes)
  static constexpr size_t kRowBytes = kVerifyQKDim * 2;
  static constexpr size_t kQBytes = kTileRows * kRowBytes;
  static constexpr size_t kKBytes = static_cast<size_t>(TileKeys) * kRowBytes;
  static constexpr size_t kPBytes = static_cast<size_t>(kTileRows) * TileKeys * 2;
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + kQBytes;
  static constexpr size_t kPOff = kKOff + kStages * kKBytes;
  static constexpr size_t kMaxOff = kPOff + kPBytes;                       // float [SCG][rows]
  static constexpr size_t kSumOff = kMaxOff + sizeof(float) * SColGroups * kTileRows;
  static constexpr size_t kAlphaOff = kSumOff + sizeof(float) * SColGroups * kTileRows;  // float [rows]
  static constexpr size_t kMaskOff = kAlphaOff + (kSameRows ? 0 : sizeof(float) * kTileRows);
  static constexpr size_t kSmemBytes = kMaskOff + 16;
};

// 64 x 64 tiles, 8 warps, ~225 KB: H100/H200. S on 4 warps of 32 rows x 32 keys (2 x 2), P V
// 2 x 4 warps of 32 rows x 128 columns. Measured on the H200 against the earlier layout
// (S 4 x 2 warps of 16 x 32, P V 4 x 2 of 16 x 256: Bf16AttnConfig<64, 64, 2, 4, 2, 4>): -5.5% at
// H=64 n=64 32k, -6.8% at n=256; the other layouts tried (P V 2 x 4 or 1 x 8 with S 4 x 2; S on
// 4 warps of 16 x 64, which saves the max barrier) were 1-3% behind this one.
using Bf16AttnSm90 = Bf16AttnConfig<64, 64, 2, 2, 2, 2>;
// 32 x 32 tiles, 8 warps, ~75 KB, one stage: for ~100 KB devices before config 12. S 2 x 4 (16 rows x 8 keys), P V 1 x 8
// (32 rows x 64 columns).
using Bf16AttnSmall = Bf16AttnConfig<32, 32, 1, 2, 4, 1>;
static_assert(verify_config_describes<Bf16AttnSm90>(kVerifyBf16Sm90),
              "verify_attn_baselines.h must describe Bf16AttnSm90");
static_assert(verify_config_describes<Bf16AttnSmall>(kVerifyBf16Small),
              "verify_attn_baselines.h must describe Bf16AttnSmall");

template <class Cfg, class OutT>
__global__ void __launch_bounds__(Cfg::kThreads, 1) verify_attn_bf16_kernel(const VerifyKernelParams k) {
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  constexpr int SM = Cfg::kSM, PM = Cfg::kPM, SCG = Cfg::kSColGroups;
  KD_DYNAMIC_SMEM(uint8_t, smem);
  uint8_t* q_s = smem + Cfg::kQOff;
  uint8_t* p_s = smem + Cfg::kPOff;
  float* red_max = reinterpret_cast<float*>(smem + Cfg::kMaxOff);      // [SCG][rows]
  float* red_sum = reinterpret_cast<float*>(smem + Cfg::kSumOff);      // [SCG][rows]
  float* red_alpha = reinterpret_cast<float*>(smem + Cfg::kAlphaOff);  // [rows] (unless kSameRows)
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const bool s_warp = Cfg::kSWarps == Cfg::kWarps || warp < Cfg::kSWarps;  // warp-uniform
  const int srg = warp % Cfg::kSRowGroups, scg = warp / Cfg::kSRowGroups;    // S (s_warp only)
  const int prg = warp % Cfg::kPRowGroups, pcg = warp / Cfg::kPRowGroups;    // P V
  const int g = lane / 4, tig = lane % 4;  // fragment row / column pair
  const SplitSchedule sched = split_schedule(k, Cfg::kTileRows, Cfg::kTileKeys, mask_s);
  const SplitWork& w = sched.w;
  const uint32_t tail_mask = sched.tail_mask;
  const int n_tiles = sched.n_tiles, prefix_tiles = sched.prefix_tiles;
  const int H = k.p.heads, T = k.p.tree_len;

  if (n_tiles == 0) {  // an empty prefix split (a shorter request): nothing visible
    write_empty_split(k, w, Cfg::kTileRows);
    return;
  }

  // this thread's S rows: tile row s_row0 + 16 i + g + 8 h for m16 tile i, half h; their
  // visibility rows as 32-bit word offsets into vis (offsets, not pointers: fewer registers
  // in a kernel at the register limit; the launcher checks that B * T * vis_words fits)
  const int s_row0 = srg * Cfg::kSRowsPerWarp;
  int vis_row[SM][2];
#pragma unroll
  for (int i = 0; i < SM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      vis_row[i][h] = (w.b * T + min(w.row0 + s_row0 + 16 * i + g + 8 * h, k.rows - 1) / H) * k.p.vis_words;
  // this thread's O rows: tile row o_row0 + 16 i + g + 8 h
  const int o_row0 = prg * Cfg::kPRowsPerWarp;

  const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(k.p.kv) + static_cast<int64_t>(w.b) * k.p.kv_batch_stride;
  float o[PM][Cfg::kOTiles][4];
#pragma unroll
  for (int i = 0; i < PM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kOTiles; ++j) o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;
  float m_run[SM][2], l_run[SM][2];  // S rows (base 2); l_run: this thread's keys only
#pragma unroll
  for (int i = 0; i < SM; ++i) m_run[i][0] = m_run[i][1] = -INFINITY, l_run[i][0] = l_run[i][1] = 0.0f;

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
      // the next tile's copies: by the warps that compute no S when there are such
      constexpr int kLoadFirst = Cfg::kSWarps < Cfg::kWarps ? Cfg::kSWarps * kWarpSize : 0;
      if (tid >= kLoadFirst) {
        const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
        load_key_tile<Cfg>(smem + Cfg::kKOff + ((it + 1) & 1) * Cfg::kKBytes, kv, k.p.kv_row_stride, nx.key0, nx.valid,
                           kLoadFirst, Cfg::kThreads - kLoadFirst);
      }
      cp_async_commit();
    }

    float s[SM][Cfg::kSTiles][4];
    float alpha[SM][2];
    float mx[SM][2];  // the row maxima of this warp's keys
    const int key_base = scg * Cfg::kKeysPerWarp;
    if (s_warp) {
      // S = Q K^T for this warp's kSRowsPerWarp rows x kKeysPerWarp keys
#pragma unroll
      for (int i = 0; i < SM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kSTiles; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll 4
      for (int kk = 0; kk < kVerifyQKDim / 16; ++kk) {
        uint32_t a[SM][4];
#pragma unroll
        for (int i = 0; i < SM; ++i) ldmatrix_x4(a[i], q_s + qk_offset(s_row0 + 16 * i + lane % 16, 2 * kk + lane / 16));
        if constexpr (Cfg::kSTiles == 1) {
          uint32_t bq[4];
          ldmatrix_x4(bq, k_s + qk_offset(key_base + lane % 8, 2 * kk + (lane / 8) % 2));  // lanes 16..31 repeat
#pragma unroll
          for (int i = 0; i < SM; ++i) mma_bf16_16816(s[i][0], a[i], bq[0], bq[1]);
        } else {
#pragma unroll
          for (int np = 0; np < Cfg::kSTiles / 2; ++np) {
            uint32_t bq[4];
            ldmatrix_x4(bq, k_s + qk_offset(key_base + 16 * np + lane % 8 + 8 * (lane / 16), 2 * kk + (lane / 8) % 2));
#pragma unroll
            for (int i = 0; i < SM; ++i) {
              mma_bf16_16816(s[i][2 * np], a[i], bq[0], bq[1]);
              mma_bf16_16816(s[i][2 * np + 1], a[i], bq[2], bq[3]);
            }
          }
        }
      }

      // scale into the base-2 domain and mask; row maxima of this warp's keys
#pragma unroll
      for (int i = 0; i < SM; ++i) {
        mx[i][0] = mx[i][1] = -INFINITY;
#pragma unroll
        for (int j = 0; j < Cfg::kSTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key_base + 8 * j + 2 * tig + (e & 1);
            bool ok = key < tile.valid;
            if (tile.tail_tile >= 0 && ok) {
              const int tk = tile.tail_tile * Cfg::kTileKeys + key;
              const uint32_t word = k.p.vis[vis_row[i][e >> 1] + (tk >> 5)];
              ok = (word >> (tk & 31)) & 1u;
            }
            s[i][j][e] = ok ? s[i][j][e] * k.scale_log2 : -INFINITY;
            mx[i][e >> 1] = fmaxf(mx[i][e >> 1], s[i][j][e]);
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(kFullMask, mx[i][h], 1));
          mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(kFullMask, mx[i][h], 2));
          if (SCG > 1 && tig == 0) red_max[scg * Cfg::kTileRows + s_row0 + 16 * i + g + 8 * h] = mx[i][h];
        }
      }
    }
    // the row maxima of every S warp are in (an S warp that sees all keys of its rows needs
    // no other warp's: one barrier less per tile)
    if constexpr (SCG > 1) __syncthreads();
    if (s_warp) {
#pragma unroll
      for (int i = 0; i < SM; ++i) {
        float m_use[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = s_row0 + 16 * i + g + 8 * h;
          float m_tile = SCG > 1 ? red_max[r] : mx[i][h];
#pragma unroll
          for (int c = 1; c < SCG; ++c) m_tile = fmaxf(m_tile, red_max[c * Cfg::kTileRows + r]);
          const float m_new = fmaxf(m_run[i][h], m_tile);
          alpha[i][h] = m_run[i][h] == -INFINITY ? 0.0f : exp2f(m_run[i][h] - m_new);
          m_use[h] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0, no NaN
          m_run[i][h] = m_new;
        }
        float rowsum[2] = {0.0f, 0.0f};
        const int r_lo = s_row0 + 16 * i + g, r_hi = r_lo + 8;
#pragma unroll
        for (int j = 0; j < Cfg::kSTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[i][j][e] = exp2f(s[i][j][e] - m_use[e >> 1]);
            rowsum[e >> 1] += s[i][j][e];
          }
          const int key = key_base + 8 * j + 2 * tig;
          *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(r_lo, key / 8) + (key % 8) * 2) =
              pack_bf16x2(s[i][j][0], s[i][j][1]);
          *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(r_hi, key / 8) + (key % 8) * 2) =
              pack_bf16x2(s[i][j][2], s[i][j][3]);
        }
        l_run[i][0] = l_run[i][0] * alpha[i][0] + rowsum[0];
        l_run[i][1] = l_run[i][1] * alpha[i][1] + rowsum[1];
        if (!Cfg::kSameRows && scg == 0 && tig == 0) {  // published by the barrier below; rewritten after the next tile's first
          red_alpha[r_lo] = alpha[i][0];
          red_alpha[r_hi] = alpha[i][1];
        }
      }
    }
    __syncthreads();  // P complete
    {
      // O *= alpha: the S rows' own when they are the O rows, else from shared memory;
      // skipped when no row's maximum moved (x * 1 == x: bit-exact), which after the first
      // tiles is most tiles
      float a_o[PM][2];
      bool unit = true;
#pragma unroll
      for (int i = 0; i < PM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if constexpr (Cfg::kSameRows) a_o[i][h] = alpha[i][h];  // PM == SM
          else a_o[i][h] = red_alpha[o_row0 + 16 * i + g + 8 * h];
          unit = unit && a_o[i][h] == 1.0f;
        }
      if (!__all_sync(kFullMask, unit)) {
#pragma unroll
        for (int i = 0; i < PM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kOTiles; ++j) {
            o[i][j][0] *= a_o[i][0];
            o[i][j][1] *= a_o[i][0];
            o[i][j][2] *= a_o[i][1];
            o[i][j][3] *= a_o[i][1];
          }
      }
    }

    // O += P V for this warp's kPRowsPerWarp rows x kColsPerWarp columns
    const int col_base = pcg * Cfg::kColsPerWarp;
#pragma unroll
    for (int ks = 0; ks < Cfg::kTileKeys / 16; ++ks) {
      uint32_t a[PM][4];
#pragma unroll
      for (int i = 0; i < PM; ++i)
        ldmatrix_x4(a[i], p_s + p_offset<Cfg::kPChunks>(o_row0 + 16 * i + lane % 16, 2 * ks + lane / 16));
#pragma unroll
      for (int np = 0; np < Cfg::kOTiles / 2; ++np) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, k_s + qk_offset(16 * ks + lane % 8 + 8 * ((lane / 8) % 2), (col_base + 16 * np) / 8 + lane / 16));
#pragma unroll
        for (int i = 0; i < PM; ++i) {
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

  // the row sums across the warp's quad and the row group's S warps; the final maxima
  if (s_warp) {
#pragma unroll
    for (int i = 0; i < SM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[i][h];
        l += __shfl_xor_sync(kFullMask, l, 1);
        l += __shfl_xor_sync(kFullMask, l, 2);
        const int r = s_row0 + 16 * i + g + 8 * h;
        if (tig == 0) {
          red_sum[scg * Cfg::kTileRows + r] = l;
          if (!Cfg::kSameRows && scg == 0) red_max[r] = m_run[i][h];  // red_max is no longer read
        }
      }
  }
  __syncthreads();
  const int col_base = pcg * Cfg::kColsPerWarp;
  const int64_t part_base = part_row0(k, w.b, w.split);  // split_group is 1 here: a partial a split
#pragma unroll
  for (int i = 0; i < PM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = o_row0 + 16 * i + g + 8 * h, m = w.row0 + r;
      if (m >= k.rows) continue;
      float l = 0.0f;
#pragma unroll
      for (int c = 0; c < SCG; ++c) l += red_sum[c * Cfg::kTileRows + r];
      const float m_row = Cfg::kSameRows ? m_run[i][h] : red_max[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse2 = l > 0.0f ? m_row + log2f(l) : -INFINITY;
      if (k.parts == 1) {
        OutT* row = static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(w.b) * k.rows + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j)
          store_out_pair(row + 8 * j, o[i][j][2 * h] * inv, o[i][j][2 * h + 1] * inv);
        if (pcg == 0 && tig == 0 && k.p.lse)
          k.p.lse[static_cast<int64_t>(w.b) * k.rows + m] = natural_lse(lse2);
      } else {
        float* row = k.part_o + (part_base + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j)
          store_out_pair(row + 8 * j, o[i][j][2 * h] * inv, o[i][j][2 * h + 1] * inv);
        if (pcg == 0 && tig == 0) k.part_lse[part_base + m] = lse2;
      }
    }
}

}  // namespace kdtree::kern
