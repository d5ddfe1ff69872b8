// The bf16 verify_attn kernel for decode-like shapes: at most 32 query rows (T * H, e.g. a
// tree of 1-3 nodes over 8 heads; up to 16 rows one m16 row group, Bf16DecodeNarrow, or for
// long splits Bf16DecodeNarrowPair, two blocks a SM), where the cache bytes, not the MMAs, set
// the time. On ~100 KB devices (sm_120) Bf16DecodeNarrowPair is the tile of every shape, in
// row tiles of 16: the largest with two key tiles in flight (docs/kernels/verify_attn.md). The plan splits the prefix over every SM (verify_attn_plan.h) so each byte of the cache is
// read once, by one CTA; partial results are merged by launch_verify_merge
// (verify_attn_common.cuh).
//
// A CTA: 32 (16) query rows (two m16 row groups, or one) x one key split, 8 warps. Per key tile
// (two stages, by bulk copies, a key row each, every warp issuing its eighth, into rows padded
// by 16 bytes):
//   S = Q K^T      warp w < kSWarps: all 32 rows x 8 keys (one n8 tile), 36 k-steps of 16 in
//                  two accumulators (one ldmatrix of K a pair of steps; two chains of 18 MMAs)
//   mask, scale, row maxima across the S warps through shared memory
//   P (bf16) -> smem; O += P V   every warp: all 32 rows x 64 of the 512 output columns
// Every warp tracks the row maxima itself (from the same shared values), so the rescaling
// of O needs no extra barrier: three barriers per key tile.
#pragma once

#include "ptx_mma.cuh"
#include "ptx_tma.cuh"
#include "verify_attn_bf16.cuh"
#include "verify_attn_clocks.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_plan.h"

namespace kdtree::kern {

// BulkKeys: key tiles by bulk copies (sm_90+: a row of 1152 bytes a copy, every warp issuing
// its share, landing on an mbarrier) into rows padded by 16 bytes, which keeps ldmatrix conflict-free
// without a swizzle: every planned decode tile. Else cp.async, 16 bytes a thread a copy, into the
// swizzled rows (the one-stage baseline, config 4: csrc/dev/verify_attn_baseline_kernels.cuh).
template <int TileKeys, int Stages, int RowGroups = 2, bool BulkKeys = false, int MinBlocks = 1>
struct Bf16DecodeConfig {
  static constexpr int kMinBlocks = MinBlocks;  // blocks a SM the registers must allow (__launch_bounds__)
  static constexpr int kRowGroups = RowGroups;  // m16 row groups: 16 query rows each
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kTileRows = 16 * kRowGroups;
  static constexpr int kTileKeys = TileKeys;
  static constexpr int kStages = Stages;
  static constexpr int kSWarps = TileKeys / 8;                 // warps computing S, 8 keys each
  static constexpr int kColsPerWarp = kVerifyLatentDim / kWarps;  // O columns of one warp
  static constexpr int kOTiles = kColsPerWarp / 8;
  static constexpr int kChunks = kVerifyQKDim / 8;             // 72 16-byte chunks per row
  static constexpr int kPChunks = TileKeys / 8;                // chunks per P row
  static_assert(kSWarps >= 1 && kSWarps <= kWarps, "one n8 key tile per S warp");
  static_assert(kOTiles % 2 == 0, "O tiles come in pairs");
  static_assert(TileKeys % 16 == 0 && 64 % TileKeys == 0, "key tiles divide the 64-key mask tiles");
  static_assert(kPChunks == 4 || kPChunks % 8 == 0, "P rows swizzle in groups of 4 or 8 chunks");

  static constexpr bool kBulkKeys = BulkKeys;
  static constexpr int kRowsPerWarp = TileKeys / kWarps;  // a warp's share of a tile's bulk copies
  static_assert(!BulkKeys || (TileKeys % kWarps == 0 && kRowsPerWarp <= kWarpSize), "a lane a row of the warp's share");
  static_assert(Stages <= 2 || BulkKeys, "cp.async tiles wait for every copy in flight: two stages at most");
  static constexpr size_t kRowBytes = kVerifyQKDim * 2;
  static constexpr size_t kKPitch = kRowBytes + (BulkKeys ? kBulkRowPad : 0);  // bytes a key row in smem
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + kTileRows * kRowBytes;
  static constexpr size_t kKBytes = static_cast<size_t>(TileKeys) * kKPitch;
  static constexpr size_t kPOff = kKOff + kStages * kKBytes;
  static constexpr size_t kMaxOff = kPOff + static_cast<size_t>(kTileRows) * TileKeys * 2;  // float [kSWarps][rows]
  static constexpr size_t kSumOff = kMaxOff + sizeof(float) * kSWarps * kTileRows;
  static constexpr size_t kMaskOff = kSumOff + sizeof(float) * kSWarps * kTileRows;
  static constexpr size_t kBarOff = kMaskOff + 16;  // uint64_t [kStages]: the bulk copies' mbarriers
  static constexpr size_t kSmemBytes = kBarOff + (BulkKeys ? kStages * sizeof(uint64_t) : 0);
  static_assert(kBarOff % sizeof(uint64_t) == 0 && kKOff % 16 == 0 && kKPitch % 16 == 0,
                "mbarriers 8-byte and bulk copy destinations 16-byte aligned");

  // Byte offset of 16-byte chunk c of key row r in a key tile.
  static KD_DEVICE uint32_t k_offset(int r, int c) {
    return BulkKeys ? static_cast<uint32_t>(r * kKPitch + c * 16) : qk_offset(r, c);
  }
};

// This warp's key rows of a tile (kRowsPerWarp from warp * kRowsPerWarp) by bulk copies on
// bar, which takes one arrival a warp (with its bytes); its rows past `valid` are zeroed (P is
// 0 there; V must not be NaN). Every warp issues a share: one warp issuing the whole tile
// held the others at the next barrier (H200: ~2.9 K cycles a tile).
template <class Cfg>
KD_DEVICE void load_key_tile_bulk(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, int key0, int valid,
                                  uint64_t* bar, int warp, int lane) {
  const int r0 = warp * Cfg::kRowsPerWarp;
  const int mine = max(0, min(Cfg::kRowsPerWarp, valid - r0));  // rows this warp copies
  if (lane == 0) mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(mine * Cfg::kRowBytes));
  __syncwarp();
  if (lane < mine)
    bulk_copy_g2s(dst + (r0 + lane) * Cfg::kKPitch, kv + (static_cast<int64_t>(key0) + r0 + lane) * row_stride, Cfg::kRowBytes, bar);
  if (mine < Cfg::kRowsPerWarp) {
    for (int idx = lane; idx < (Cfg::kRowsPerWarp - mine) * Cfg::kChunks; idx += kWarpSize) {
      const int r = r0 + mine + idx / Cfg::kChunks, c = idx % Cfg::kChunks;
      *reinterpret_cast<uint4*>(dst + Cfg::k_offset(r, c)) = make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async_smem();  // these generic writes before the bulk copies that refill the buffer later
  }
}

// Key tile `kt` into dst: the bulk form on bar, or the cp.async form committed as one group.
template <class Cfg>
KD_DEVICE void issue_key_tile(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, const KeyTile& kt, uint64_t* bar,
                              int warp, int lane) {
  if constexpr (Cfg::kBulkKeys) {
    load_key_tile_bulk<Cfg>(dst, kv, row_stride, kt.key0, kt.valid, bar, warp, lane);
  } else {
    load_key_tile<Cfg>(dst, kv, row_stride, kt.key0, kt.valid);
    cp_async_commit();
  }
}

using Bf16DecodeSm90 = Bf16DecodeConfig<64, 2, 2, true>;           // ~188 KB: H100/H200
using Bf16DecodeNarrow = Bf16DecodeConfig<64, 2, 1, true>;         // ~167 KB, <= 16 rows: H100/H200
// ~93 KB: two blocks a SM on the H200 (long splits); on sm_120 one, at every shape (row tiles of 16)
using Bf16DecodeNarrowPair = Bf16DecodeConfig<32, 2, 1, true, 2>;
static_assert(verify_config_describes<Bf16DecodeSm90>(kVerifyBf16Decode),
              "verify_attn_configs.h must describe Bf16DecodeSm90");
static_assert(verify_config_describes<Bf16DecodeNarrow>(kVerifyBf16DecodeNarrow),
              "verify_attn_configs.h must describe Bf16DecodeNarrow");
static_assert(verify_config_describes<Bf16DecodeNarrowPair>(kVerifyBf16DecodeNarrowPair),
              "verify_attn_configs.h must describe Bf16DecodeNarrowPair");

template <class Cfg, class OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) verify_attn_decode_kernel(const VerifyKernelParams k) {
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  ATTN_CLK_DECL;  // phase clocks of a measuring build (verify_attn_clocks.cuh)
  constexpr int RG = Cfg::kRowGroups;
  KD_DYNAMIC_SMEM(uint8_t, smem);
  uint8_t* q_s = smem + Cfg::kQOff;
  uint8_t* p_s = smem + Cfg::kPOff;
  float* red_max = reinterpret_cast<float*>(smem + Cfg::kMaxOff);  // [kSWarps][rows]
  float* red_sum = reinterpret_cast<float*>(smem + Cfg::kSumOff);  // [kSWarps][rows]
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, tig = lane % 4;  // fragment row / column pair
  const bool s_warp = warp < Cfg::kSWarps;  // warp-uniform
  const SplitSchedule sched = split_schedule(k, Cfg::kTileRows, Cfg::kTileKeys, mask_s);
  const SplitWork& w = sched.w;
  const uint32_t tail_mask = sched.tail_mask;
  const int n_tiles = sched.n_tiles, prefix_tiles = sched.prefix_tiles;
  const int H = k.p.heads, T = k.p.tree_len;

  // this thread's fragment rows: row group r, half h -> tile row 16 r + g + 8 h
  int vis_row[RG][2];  // word offset of each row's visibility row (rows past M: the last row's)
#pragma unroll
  for (int r = 0; r < RG; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = min(w.row0 + 16 * r + g + 8 * h, k.rows - 1);
      vis_row[r][h] = (w.b * T + m / H) * k.p.vis_words;
    }

  if (n_tiles == 0) {  // an empty prefix split (a shorter request): nothing visible
    write_empty_split(k, w, Cfg::kTileRows);
    return;
  }
  uint64_t* kbar = reinterpret_cast<uint64_t*>(smem + Cfg::kBarOff);  // [kStages] (bulk copies)
  if (Cfg::kBulkKeys) {
    if (tid == 0) {
      for (int st = 0; st < Cfg::kStages; ++st) mbarrier_init(&kbar[st], Cfg::kWarps);  // a warp's arrive.expect_tx each
      fence_mbarrier_init();
    }
    __syncthreads();  // the mbarriers initialised, for every thread
  }

  const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(k.p.kv) + static_cast<int64_t>(w.b) * k.p.kv_batch_stride;
  float o[RG][Cfg::kOTiles][4];
#pragma unroll
  for (int r = 0; r < RG; ++r)
#pragma unroll
    for (int j = 0; j < Cfg::kOTiles; ++j) o[r][j][0] = o[r][j][1] = o[r][j][2] = o[r][j][3] = 0.0f;
  float m_run[RG][2], l_run[RG][2];  // base-2 running max (every warp); partial sums (S warps)
#pragma unroll
  for (int r = 0; r < RG; ++r) m_run[r][0] = m_run[r][1] = -INFINITY, l_run[r][0] = l_run[r][1] = 0.0f;

  load_query_tile<Cfg>(q_s, k, w.b, w.row0);
  for (int t = 0; t < max(1, Cfg::kStages - 1) && t < n_tiles; ++t) {  // the first kStages - 1 tiles (one at least)
    const KeyTile kt = key_tile_at(w, prefix_tiles, tail_mask, t, Cfg::kTileKeys, T);
    issue_key_tile<Cfg>(smem + Cfg::kKOff + t * Cfg::kKBytes, kv, k.p.kv_row_stride, kt, &kbar[t], warp, lane);
  }
  cp_async_commit();  // the query tile's copies (the bulk form's key tiles are not in a group)

  const int key_base = 8 * warp;  // an S warp's keys within the tile
  ATTN_CLK_LAP(kClkPrologue);
  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it % Cfg::kStages;
    uint8_t* k_s = smem + Cfg::kKOff + buf * Cfg::kKBytes;
    const KeyTile tile = key_tile_at(w, prefix_tiles, tail_mask, it, Cfg::kTileKeys, T);
    cp_async_wait<0>();
    if (Cfg::kBulkKeys) mbarrier_wait_parity(&kbar[buf], static_cast<uint32_t>((it / Cfg::kStages) & 1));
    __syncthreads();  // tile `it` (and Q) landed; everyone is done with tile it-1
    const int ahead = it + Cfg::kStages - 1;  // the tile that goes where tile it-1 was
    if (Cfg::kStages >= 2 && ahead < n_tiles) {
      const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, ahead, Cfg::kTileKeys, T);
      const int st = ahead % Cfg::kStages;
      issue_key_tile<Cfg>(smem + Cfg::kKOff + st * Cfg::kKBytes, kv, k.p.kv_row_stride, nx, &kbar[st], warp, lane);
    }
    ATTN_CLK_LAP(kClkTop);

    // S = Q K^T: this warp's 8 keys for all rows; masked, scaled, row maxima of its keys
    float s[RG][4];
    if (s_warp) {
#pragma unroll
      for (int r = 0; r < RG; ++r) s[r][0] = s[r][1] = s[r][2] = s[r][3] = 0.0f;
      // two k16 steps a pass: one ldmatrix of K for both, their MMAs into two accumulators
      // (two dependent chains of 18 MMAs; one chain of 36 spent ~2.7 K cycles a tile), summed after
      float s_odd[RG][4];
#pragma unroll
      for (int r = 0; r < RG; ++r) s_odd[r][0] = s_odd[r][1] = s_odd[r][2] = s_odd[r][3] = 0.0f;
#pragma unroll 2
      for (int kk = 0; kk < kVerifyQKDim / 16; kk += 2) {
        uint32_t bq[4];
        ldmatrix_x4(bq, k_s + Cfg::k_offset(key_base + lane % 8, 2 * kk + lane / 8));
#pragma unroll
        for (int r = 0; r < RG; ++r) {
          uint32_t a[4], a_odd[4];
          ldmatrix_x4(a, q_s + qk_offset(16 * r + lane % 16, 2 * kk + lane / 16));
          ldmatrix_x4(a_odd, q_s + qk_offset(16 * r + lane % 16, 2 * kk + 2 + lane / 16));
          mma_bf16_16816(s[r], a, bq[0], bq[1]);
          mma_bf16_16816(s_odd[r], a_odd, bq[2], bq[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < RG; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[r][e] += s_odd[r][e];
#pragma unroll
      for (int r = 0; r < RG; ++r) {
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_base + 2 * tig + (e & 1);
          bool ok = key < tile.valid;
          if (tile.tail_tile >= 0 && ok) {
            const int tk = tile.tail_tile * Cfg::kTileKeys + key;
            ok = (k.p.vis[vis_row[r][e >> 1] + (tk >> 5)] >> (tk & 31)) & 1u;
          }
          s[r][e] = ok ? s[r][e] * k.scale_log2 : -INFINITY;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[r][e]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 2));
          if (tig == 0) red_max[warp * Cfg::kTileRows + 16 * r + g + 8 * h] = mx[h];
        }
      }
    }
    ATTN_CLK_LAP(kClkSIssue);
    __syncthreads();  // every S warp's maxima are in
    ATTN_CLK_LAP(kClkMax);

    // new row maxima (every warp, from the same values); P of the S warps; O rescaled
    float alpha[RG][2], m_use[RG][2];
#pragma unroll
    for (int r = 0; r < RG; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * r + g + 8 * h;
        float m_tile = red_max[row];
#pragma unroll
        for (int c = 1; c < Cfg::kSWarps; ++c) m_tile = fmaxf(m_tile, red_max[c * Cfg::kTileRows + row]);
        const float m_new = fmaxf(m_run[r][h], m_tile);
        alpha[r][h] = m_run[r][h] == -INFINITY ? 0.0f : exp2f(m_run[r][h] - m_new);
        m_use[r][h] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0, no NaN
        m_run[r][h] = m_new;
      }
    if (s_warp) {
#pragma unroll
      for (int r = 0; r < RG; ++r) {
        float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[r][e] = exp2f(s[r][e] - m_use[r][e >> 1]);
          rowsum[e >> 1] += s[r][e];
        }
        const int key = key_base + 2 * tig;
        *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(16 * r + g, key / 8) + (key % 8) * 2) =
            pack_bf16x2(s[r][0], s[r][1]);
        *reinterpret_cast<uint32_t*>(p_s + p_offset<Cfg::kPChunks>(16 * r + g + 8, key / 8) + (key % 8) * 2) =
            pack_bf16x2(s[r][2], s[r][3]);
        l_run[r][0] = l_run[r][0] * alpha[r][0] + rowsum[0];
        l_run[r][1] = l_run[r][1] * alpha[r][1] + rowsum[1];
      }
    }
#pragma unroll
    for (int r = 0; r < RG; ++r)
#pragma unroll
      for (int j = 0; j < Cfg::kOTiles; ++j) {
        o[r][j][0] *= alpha[r][0];
        o[r][j][1] *= alpha[r][0];
        o[r][j][2] *= alpha[r][1];
        o[r][j][3] *= alpha[r][1];
      }
    __syncthreads();  // P complete
    ATTN_CLK_LAP(kClkSoftmax);

    // O += P V: all rows x this warp's 64 columns
    const int col_base = warp * Cfg::kColsPerWarp;
#pragma unroll
    for (int ks = 0; ks < Cfg::kTileKeys / 16; ++ks) {
      uint32_t a[RG][4];
#pragma unroll
      for (int r = 0; r < RG; ++r) ldmatrix_x4(a[r], p_s + p_offset<Cfg::kPChunks>(16 * r + lane % 16, 2 * ks + lane / 16));
#pragma unroll
      for (int np = 0; np < Cfg::kOTiles / 2; ++np) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, k_s + Cfg::k_offset(16 * ks + lane % 8 + 8 * ((lane / 8) % 2), (col_base + 16 * np) / 8 + lane / 16));
#pragma unroll
        for (int r = 0; r < RG; ++r) {
          mma_bf16_16816(o[r][2 * np], a[r], bv[0], bv[1]);
          mma_bf16_16816(o[r][2 * np + 1], a[r], bv[2], bv[3]);
        }
      }
    }
    ATTN_CLK_LAP(kClkPV);
    if (Cfg::kStages == 1 && it + 1 < n_tiles) {
      __syncthreads();  // everyone is done with the single K buffer
      const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
      issue_key_tile<Cfg>(smem + Cfg::kKOff, kv, k.p.kv_row_stride, nx, &kbar[0], warp, lane);
    }
  }

  // row sums: the S warps' partial sums, across their quads and then through shared memory
  if (s_warp) {
#pragma unroll
    for (int r = 0; r < RG; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[r][h];
        l += __shfl_xor_sync(kFullMask, l, 1);
        l += __shfl_xor_sync(kFullMask, l, 2);
        if (tig == 0) red_sum[warp * Cfg::kTileRows + 16 * r + g + 8 * h] = l;
      }
  }
  __syncthreads();
  ATTN_CLK_LAP(kClkEpilogue);  // (the stores below are not counted)
  ATTN_CLK_FLUSH(n_tiles);
  const int col_base = warp * Cfg::kColsPerWarp;
#pragma unroll
  for (int r = 0; r < RG; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * r + g + 8 * h, m = w.row0 + row;
      if (m >= k.rows) continue;
      float l = 0.0f;
#pragma unroll
      for (int c = 0; c < Cfg::kSWarps; ++c) l += red_sum[c * Cfg::kTileRows + row];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse2 = l > 0.0f ? m_run[r][h] + log2f(l) : -INFINITY;
      if (k.parts == 1) {
        OutT* out = static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(w.b) * k.rows + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j)
          store_out_pair(out + 8 * j, o[r][j][2 * h] * inv, o[r][j][2 * h + 1] * inv);
        if (warp == 0 && tig == 0 && k.p.lse)
          k.p.lse[static_cast<int64_t>(w.b) * k.rows + m] = natural_lse(lse2);
      } else {
        const int64_t base = part_row0(k, w.b, w.split);  // split_group is 1 here: a partial a split
        float* out = k.part_o + (base + m) * kVerifyLatentDim + col_base + 2 * tig;
#pragma unroll
        for (int j = 0; j < Cfg::kOTiles; ++j)
          store_out_pair(out + 8 * j, o[r][j][2 * h] * inv, o[r][j][2 * h + 1] * inv);
        if (warp == 0 && tig == 0) k.part_lse[base + m] = lse2;
      }
    }
}

}  // namespace kdtree::kern
