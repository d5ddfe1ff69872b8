// What the seesaw tile (verify_attn_seesaw.cuh, config 10: the plan's choice on sm_90a) builds on:
// the wgmma tile's layout (Bf16AttnWgmma: 64 query rows of one request x one split of its keys,
// two warpgroups; Q and the key tiles in shared memory in the 128-byte-swizzle layout wgmma
// reads, sw128_offset: 64-column blocks of rows x 128 bytes), the TMA maps and loads of Q and the
// key tiles, the masking and row maxima of S, and the epilogue's row sums and stores. A
// warpgroup's accumulator rows are its S rows (16 (warp % 4) + lane / 4, + 8), so the rescaling
// of O needs no exchange. The wgmma tiles before the seesaw (S split over the warpgroups' key
// halves, P via shared memory or registers, cp.async or TMA loads) were slower and are gone
// (docs/kernels/verify_attn.md, appendix).
#pragma once

#include "ptx_mma.cuh"
#include "ptx_tma.cuh"
#include "ptx_wgmma.cuh"
#include "verify_attn_clocks.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_plan.h"

namespace kdtree::kern {

struct Bf16AttnWgmma {
  static constexpr int kWarpGroups = 2;
  static constexpr int kGroupThreads = 4 * kWarpSize;
  static constexpr int kThreads = kWarpGroups * kGroupThreads;
  static constexpr int kTileRows = 64;   // the wgmma M
  static constexpr int kTileKeys = 64;
  static constexpr int kKeysPerGroup = kTileKeys / kWarpGroups;         // S columns of a warpgroup
  static constexpr int kColsPerGroup = kVerifyLatentDim / kWarpGroups;  // O columns of a warpgroup
  static constexpr int kORegs = kColsPerGroup / 2;                       // m64n256 accumulators
  static constexpr int kLatentChunks = kVerifyLatentDim / 8;             // 64
  static constexpr int kBlockCols = 64;                                  // one 128-byte swizzle row of bf16
  static constexpr int kBlocks = kVerifyQKDim / kBlockCols;              // 9 64-column blocks per row
  static constexpr int kBlockBytes = kTileRows * 128;                    // one 64-column block of a tile
  static_assert(kTileKeys == kTileRows, "Q and key tiles share the block size (kBlockBytes)");
  static_assert(kColsPerGroup == 256 && kKeysPerGroup == 32, "the wgmma shapes (m64n32, m64n256)");
  static constexpr size_t kTileBytes = static_cast<size_t>(kTileRows) * kVerifyQKDim * 2;  // Q or one key tile
};
static_assert(Bf16AttnWgmma::kTileBytes % kWgmmaAtomBytes == 0 && Bf16AttnWgmma::kBlockBytes % kWgmmaAtomBytes == 0,
              "TMA boxes land on swizzle atoms (the 128-byte swizzle pattern is sw128_offset's from there)");

// Q and the key tiles by the Tensor Memory Accelerator: one thread issues a tile as 9 boxes of
// 64 rows x 64 columns (one per 64-column block: the 128-byte-swizzle box layout is
// sw128_offset's), which land on an mbarrier the consumers wait on.
struct AttnTmaMaps {
  TmaMap kv;     // the latent cache: {576 columns, max_prefix + T rows, batch}, kv_row_stride / kv_batch_stride
  TmaMap q_lat;  // {512, T * H rows, batch}
  TmaMap q_pe;   // {64, T * H rows, batch}
};

// The maps of a launch (host side; the launcher and the CPU emulator share it). Rows past a
// request's max_prefix + T cache rows and past its T * H query rows read as zero; a request's
// rows between its own prefix + T and that bound are real memory, masked by the kernel.
inline KernelResult make_attn_tma_maps(const VerifyKernelParams& k, AttnTmaMaps* maps) {
  using Cfg = Bf16AttnWgmma;
  constexpr uint64_t kBf16Bytes = 2;
  constexpr uint32_t kBoxCols = Cfg::kBlockCols;  // a box is one 64-column block
  const uint64_t batch = static_cast<uint64_t>(k.p.batch), rows = static_cast<uint64_t>(k.rows);
  const uint64_t kv_rows = static_cast<uint64_t>(k.p.max_prefix) + static_cast<uint64_t>(k.p.tree_len);
  const uint64_t row_bytes = static_cast<uint64_t>(k.p.kv_row_stride) * kBf16Bytes;
  // one request: any stride past its rows (the batch coordinate is always 0)
  const uint64_t batch_bytes = batch > 1 ? static_cast<uint64_t>(k.p.kv_batch_stride) * kBf16Bytes : kv_rows * row_bytes;
  const uint32_t key_box[3] = {kBoxCols, static_cast<uint32_t>(Cfg::kTileKeys), 1};
  const uint32_t q_box[3] = {kBoxCols, static_cast<uint32_t>(Cfg::kTileRows), 1};
  if (KernelResult r = encode_tma_map_bf16_3d(&maps->kv, k.p.kv, {kVerifyQKDim, kv_rows, batch}, {row_bytes, batch_bytes},
                                              key_box, "verify_attn kv");
      !r.ok())
    return r;
  const uint64_t lat_row = kVerifyLatentDim * kBf16Bytes, pe_row = kVerifyRopeDim * kBf16Bytes;
  if (KernelResult r = encode_tma_map_bf16_3d(&maps->q_lat, k.p.q_lat, {kVerifyLatentDim, rows, batch},
                                              {lat_row, rows * lat_row}, q_box, "verify_attn q_lat");
      !r.ok())
    return r;
  return encode_tma_map_bf16_3d(&maps->q_pe, k.p.q_pe, {kVerifyRopeDim, rows, batch}, {pe_row, rows * pe_row}, q_box,
                                "verify_attn q_pe");
}

// Q by TMA (one thread): 8 boxes of q_lat and 1 of q_pe, rows row0 .. row0 + 63 of request b.
KD_DEVICE void tma_load_query_tile(uint8_t* dst, const AttnTmaMaps& maps, uint64_t* bar, int b, int row0) {
  using Cfg = Bf16AttnWgmma;
#pragma unroll
  for (int blk = 0; blk < kVerifyLatentDim / Cfg::kBlockCols; ++blk)
    tma_load_3d(dst + blk * Cfg::kBlockBytes, &maps.q_lat, bar, blk * Cfg::kBlockCols, row0, b);
  tma_load_3d(dst + (kVerifyLatentDim / Cfg::kBlockCols) * Cfg::kBlockBytes, &maps.q_pe, bar, 0, row0, b);
}

// A key tile by TMA (one thread): its 9 64-column blocks of cache rows key0 .. key0 + 63.
KD_DEVICE void tma_load_key_tile(uint8_t* dst, const TmaMap* kv, uint64_t* bar, int b, int key0) {
  using Cfg = Bf16AttnWgmma;
#pragma unroll
  for (int blk = 0; blk < Cfg::kBlocks; ++blk)
    tma_load_3d(dst + blk * Cfg::kBlockBytes, kv, bar, blk * Cfg::kBlockCols, key0, b);
}

// Scale S into the base-2 domain and mask it (keys past tile.valid; tree keys by the ancestor
// bits), then this thread's two rows' maxima over its kRegs accumulators, reduced over the quad
// (the seesaw tile). key_base: the tile column of this thread's first accumulator column block;
// full: nothing to mask (a whole prefix tile), so no per-key test. kTileKeys: keys a tile (the
// tree's tiles are numbered in them).
template <int kTileKeys, int kRegs>
KD_DEVICE void wgmma_mask_max(float (&s)[kRegs], const KeyTile& tile, const VerifyKernelParams& k,
                              const int (&vis_row)[2], int tig, int key_base, bool full, float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
  if (full) {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) {
      s[j] *= k.scale_log2;
      mx[(j >> 1) & 1] = fmaxf(mx[(j >> 1) & 1], s[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_base + 8 * j + 2 * tig + (e & 1);
        bool ok = key < tile.valid;
        if (tile.tail_tile >= 0 && ok) {
          const int tk = tile.tail_tile * kTileKeys + key;
          ok = (k.p.vis[vis_row[e >> 1] + (tk >> 5)] >> (tk & 31)) & 1u;
        }
        float& x = s[4 * j + e];
        x = ok ? x * k.scale_log2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(kFullMask, mx[h], 2));
  }
}

// The epilogue's row sums (the seesaw tile): this thread's partial sums of its two rows, summed
// over its quad, into red_sum[group][row] for wgmma_store_rows (after a barrier).
template <class Cfg>
KD_DEVICE void wgmma_publish_row_sums(const float (&l_run)[2], float* red_sum, int group, int row_lo, int tig) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    if (tig == 0) red_sum[group * Cfg::kTileRows + row_lo + 8 * h] = l;
  }
}

// This thread's two accumulator rows times f[h] to the output (one partial a row: with the
// row's lse, natural log) or to partial `slot` (normalised O and base-2 lse); lse_writer: the
// one thread of the row's quad and of the two warpgroups that writes the lse.
template <class Cfg, class OutT>
KD_DEVICE void wgmma_store_scaled(const VerifyKernelParams& k, const SplitWork& w, int slot, const float (&o)[Cfg::kORegs],
                                  const float (&f)[2], const float (&lse2)[2], bool lse_writer, int row_lo, int tig,
                                  int col_base) {
  const int64_t part_base = part_row0(k, w.b, slot);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = w.row0 + row_lo + 8 * h;
    if (m >= k.rows) continue;
    auto store = [&](auto* row) {  // OutT (the output) or float (a partial)
#pragma unroll
      for (int j = 0; j < Cfg::kORegs / 4; ++j) store_out_pair(row + 8 * j, o[4 * j + 2 * h] * f[h], o[4 * j + 2 * h + 1] * f[h]);
    };
    if (k.parts == 1) {
      store(static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(w.b) * k.rows + m) * kVerifyLatentDim + col_base + 2 * tig);
      if (lse_writer && k.p.lse) k.p.lse[static_cast<int64_t>(w.b) * k.rows + m] = natural_lse(lse2[h]);
    } else {
      store(k.part_o + (part_base + m) * kVerifyLatentDim + col_base + 2 * tig);
      if (lse_writer) k.part_lse[part_base + m] = lse2[h];
    }
  }
}

// This thread's rows' 1 / (row sum) and base-2 lse from the row sums both warpgroups left in
// red_sum ([groups][tile rows]) and its running maxima.
template <class Cfg>
KD_DEVICE void wgmma_row_totals(const float (&m_run)[2], const float* red_sum, int row_lo, float (&inv)[2], float (&lse2)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_lo + 8 * h;
    const float l = red_sum[r] + red_sum[Cfg::kTileRows + r];
    inv[h] = l > 0.0f ? 1.0f / l : 0.0f;
    lse2[h] = l > 0.0f ? m_run[h] + log2f(l) : -INFINITY;
  }
}

// The seesaw tile's epilogue stores (a partial a split): this thread's two
// accumulator rows, normalised, to the output or to the split's partial. Call after the
// barrier that publishes red_sum.
template <class Cfg, class OutT>
KD_DEVICE void wgmma_store_rows(const VerifyKernelParams& k, const SplitWork& w, const float (&o)[Cfg::kORegs],
                                const float (&m_run)[2], const float* red_sum, int group, int row_lo, int tig,
                                int col_base) {
  float inv[2], lse2[2];
  wgmma_row_totals<Cfg>(m_run, red_sum, row_lo, inv, lse2);
  wgmma_store_scaled<Cfg, OutT>(k, w, w.split, o, inv, lse2, group == 0 && tig == 0, row_lo, tig, col_base);
}

}  // namespace kdtree::kern
