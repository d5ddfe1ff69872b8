// The bf16 verify_attn kernel on Hopper's warpgroup MMA (wgmma, sm_90a only).
//
// A CTA takes 64 query rows (t, h) of one request and one split of its keys, like
// Bf16AttnSm90, with two warpgroups (8 warps). Q and the key tiles sit in shared memory in
// the 128-byte-swizzle layout wgmma reads (sw128_offset: 64-column blocks of rows x 128
// bytes), the key tiles double-buffered with cp.async. Per 64-key tile:
//   S = Q K^T        warpgroup g: the 64 rows x keys 32 g .. 32 g + 31, 36 m64n32k16 (both
//                    operands from shared memory); the next tile's copies are issued meanwhile
//   mask, scale      prefix tail beyond the split, tree keys by the ancestor bits
//   online softmax   row maxima of the two halves meet in shared memory; both warpgroups
//                    derive the same maxima and rescaling for their rows
//   P (bf16) -> smem the whole 64 x 64 P, swizzled, K-major
//   O += P V         warpgroup g: output columns 256 g .. 256 g + 255, 4 m64n256k16 with V
//                    (= the key tile's first 512 columns) read N-major; 128 f32 registers;
//                    the two steps over the group's own keys take P from its registers and
//                    are issued before the barrier that publishes P (config 7, own P in registers)
// A warpgroup's accumulator rows are its S rows (16 (warp % 4) + lane / 4, + 8), so the
// rescaling of O needs no exchange. Three barriers a tile (tile landed, maxima, P).
// The TMA wgmma tile (config 9) loads Q and the key tiles with TMA instead (one thread issues them; mbarriers
// say when a tile landed and when its buffer is free: two barriers a tile; see kTma below).
// The seesaw tile (config 10), the plan's choice on sm_90a, is verify_attn_seesaw.cuh (TMA, the warpgroups on
// alternate key tiles).
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
  static constexpr int kSRegs = kKeysPerGroup / 2;                       // m64n32 accumulators
  static constexpr int kORegs = kColsPerGroup / 2;                       // m64n256 accumulators
  static constexpr int kChunks = kVerifyQKDim / 8;                       // 72 16-byte chunks per row
  static constexpr int kLatentChunks = kVerifyLatentDim / 8;             // 64
  static constexpr int kBlockCols = 64;                                  // one 128-byte swizzle row of bf16
  static constexpr int kBlocks = kVerifyQKDim / kBlockCols;              // 9 64-column blocks per row
  static constexpr int kBlockBytes = kTileRows * 128;                    // one 64-column block of a tile
  static constexpr int kStages = 2;                                      // key-tile buffers
  static_assert(kTileKeys == kTileRows, "Q and key tiles share the block size (kBlockBytes)");
  static_assert(kColsPerGroup == 256 && kKeysPerGroup == 32, "the wgmma shapes below (m64n32, m64n256)");

  // shared-memory layout (bytes from the 1024-byte aligned base)
  static constexpr size_t kTileBytes = static_cast<size_t>(kTileRows) * kVerifyQKDim * 2;  // Q or one key tile
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + kTileBytes;
  static constexpr size_t kPOff = kKOff + kStages * kTileBytes;
  static constexpr size_t kMaxOff = kPOff + static_cast<size_t>(kTileRows) * kTileKeys * 2;  // float [groups][rows]
  static constexpr size_t kSumOff = kMaxOff + sizeof(float) * kWarpGroups * kTileRows;        // float [groups][rows]
  static constexpr size_t kMaskOff = kSumOff + sizeof(float) * kWarpGroups * kTileRows;
  // + slack to align the base to a swizzle atom (the dynamic shared memory's own alignment
  // is not promised to be 1024 bytes)
  static constexpr size_t kSmemBytes = kMaskOff + 16 + kWgmmaAtomBytes;
  // config 9 (TMA) also keeps its mbarriers after the mask: uint64_t full[kStages], empty[kStages]
  static constexpr size_t kBarOff = kMaskOff + 16;
  static constexpr size_t kTmaSmemBytes = kBarOff + 2 * kStages * sizeof(uint64_t) + kWgmmaAtomBytes;
};
static_assert(Bf16AttnWgmma::kSmemBytes == kVerifyConfigShapes[kVerifyBf16Wgmma].smem_bytes &&
                  Bf16AttnWgmma::kTileRows == kVerifyConfigShapes[kVerifyBf16Wgmma].tile_rows &&
                  Bf16AttnWgmma::kTileKeys == kVerifyConfigShapes[kVerifyBf16Wgmma].tile_keys,
              "verify_attn_plan.h must describe Bf16AttnWgmma");
static_assert(kVerifyConfigShapes[kVerifyBf16WgmmaRs].smem_bytes == Bf16AttnWgmma::kSmemBytes &&
                  kVerifyConfigShapes[kVerifyBf16WgmmaLean].smem_bytes == Bf16AttnWgmma::kSmemBytes,
              "configs 7 and 8 are Bf16AttnWgmma variants");
static_assert(kVerifyConfigShapes[kVerifyBf16WgmmaTma].smem_bytes == Bf16AttnWgmma::kTmaSmemBytes &&
                  kVerifyConfigShapes[kVerifyBf16WgmmaTma].tile_rows == Bf16AttnWgmma::kTileRows &&
                  kVerifyConfigShapes[kVerifyBf16WgmmaTma].tile_keys == Bf16AttnWgmma::kTileKeys,
              "config 9 is the Bf16AttnWgmma tile with TMA loads");
static_assert(Bf16AttnWgmma::kBarOff % sizeof(uint64_t) == 0, "mbarriers are 8-byte aligned");
static_assert(Bf16AttnWgmma::kKOff % kWgmmaAtomBytes == 0 && Bf16AttnWgmma::kBlockBytes % kWgmmaAtomBytes == 0,
              "TMA boxes land on swizzle atoms (the 128-byte swizzle pattern is sw128_offset's from there)");

// The query tile (all threads), swizzled for wgmma.
KD_DEVICE void wgmma_load_query_tile(uint8_t* dst, const VerifyKernelParams& k, int b, int row0) {
  using Cfg = Bf16AttnWgmma;
  const __nv_bfloat16* q_lat = static_cast<const __nv_bfloat16*>(k.p.q_lat);
  const __nv_bfloat16* q_pe = static_cast<const __nv_bfloat16*>(k.p.q_pe);
  for (int idx = static_cast<int>(threadIdx.x); idx < Cfg::kTileRows * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks, c = idx - r * Cfg::kChunks;
    const int m = row0 + r;
    const bool ok = m < k.rows;
    const int64_t row = static_cast<int64_t>(b) * k.rows + m;
    const __nv_bfloat16* src = !ok ? q_lat
                               : c < Cfg::kLatentChunks ? q_lat + row * kVerifyLatentDim + c * 8
                                                        : q_pe + row * kVerifyRopeDim + (c - Cfg::kLatentChunks) * 8;
    cp_async_16(dst + sw128_offset(Cfg::kTileRows, r, c), src, ok);
  }
}

// Copies of a key tile's chunks by all threads (rows >= valid zero-filled), swizzled for wgmma.
KD_DEVICE void wgmma_load_key_tile(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, int key0, int valid) {
  using Cfg = Bf16AttnWgmma;
  for (int idx = static_cast<int>(threadIdx.x); idx < Cfg::kTileKeys * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks, c = idx - r * Cfg::kChunks;
    const bool ok = r < valid;
    const __nv_bfloat16* src = ok ? kv + (static_cast<int64_t>(key0) + r) * row_stride + c * 8 : kv;
    cp_async_16(dst + sw128_offset(Cfg::kTileKeys, r, c), src, ok);
  }
}

// The same copies with the index arithmetic hoisted (the lean variant, kLean): thread t takes
// latent chunk t % 64 of rows t / 64 + 4 i (16 copies) and rope chunk 64 + t % 8 of rows
// t / 8 + 32 i (2 copies), so consecutive copies differ by constant offsets (the swizzle of
// rows r and r + 4 differs only in chunk bit 2) instead of a division and a swizzle each.
KD_DEVICE void wgmma_load_key_tile_lean(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, int key0, int valid) {
  using Cfg = Bf16AttnWgmma;
  constexpr int kLatentRowsPerPass = Cfg::kThreads / Cfg::kLatentChunks;               // 4
  constexpr int kRopeChunks = Cfg::kChunks - Cfg::kLatentChunks;                        // 8
  constexpr int kRopeRowsPerPass = Cfg::kThreads / kRopeChunks;                         // 32
  static_assert(Cfg::kThreads % Cfg::kLatentChunks == 0 && kLatentRowsPerPass == 4, "rows r and r + 4: chunk bit 2");
  static_assert(Cfg::kTileKeys % kLatentRowsPerPass == 0 && Cfg::kTileKeys % kRopeRowsPerPass == 0, "whole passes");
  const int t = static_cast<int>(threadIdx.x);
  {
    const int c = t % Cfg::kLatentChunks, r0 = t / Cfg::kLatentChunks;
    const uint32_t base = static_cast<uint32_t>((c >> 3) * Cfg::kBlockBytes + r0 * 128);
    const uint32_t sw_even = static_cast<uint32_t>(((c & 7) ^ r0) << 4), sw_odd = sw_even ^ (4u << 4);
    const __nv_bfloat16* src = kv + (static_cast<int64_t>(key0) + r0) * row_stride + c * 8;
#pragma unroll
    for (int i = 0; i < Cfg::kTileKeys / kLatentRowsPerPass; ++i) {
      const int r = r0 + kLatentRowsPerPass * i;
      cp_async_16(dst + base + i * kLatentRowsPerPass * 128 + ((i & 1) ? sw_odd : sw_even),
                  r < valid ? src + i * kLatentRowsPerPass * row_stride : kv, r < valid);
    }
  }
  {
    const int c = Cfg::kLatentChunks + t % kRopeChunks, r0 = t / kRopeChunks;
    const uint32_t off = static_cast<uint32_t>((c >> 3) * Cfg::kBlockBytes + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4));
    const __nv_bfloat16* src = kv + (static_cast<int64_t>(key0) + r0) * row_stride + c * 8;
#pragma unroll
    for (int i = 0; i < Cfg::kTileKeys / kRopeRowsPerPass; ++i) {  // rows r0 + 32 i: same swizzle
      const int r = r0 + kRopeRowsPerPass * i;
      cp_async_16(dst + off + i * kRopeRowsPerPass * 128, r < valid ? src + i * kRopeRowsPerPass * row_stride : kv,
                  r < valid);
    }
  }
}

// The TMA wgmma tile (config 9, kTma): Q and the key tiles by the Tensor Memory Accelerator. Thread 0 issues a
// tile as 9 boxes of 64 rows x 64 columns (one per 64-column block: the 128-byte-swizzle box
// layout is sw128_offset's), which land on the buffer's `full` mbarrier; the consumers wait on
// its parity instead of cp.async groups and the top-of-tile barrier. Before refilling a buffer
// thread 0 waits on its `empty` mbarrier, which warpgroup 1 arrives at once its P V of the
// tile that used it is complete (thread 0's own warpgroup is ordered by program order).
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
// (configs 6-10). key_base: the tile column of this thread's first accumulator column block;
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

// The epilogue's row sums (configs 7-10): this thread's partial sums of its two rows, summed
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

// The wgmma kernels' epilogue stores (configs 7-10, a partial a split): this thread's two
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

// kOwnPInRegs: the P V steps over a warpgroup's own keys take P from registers, before the
// barrier that publishes P (config kVerifyBf16WgmmaRs: 3-4% faster on the H200); else all
// four from shared memory (kVerifyBf16Wgmma, for timing).
// kLean (config kVerifyBf16WgmmaLean, with kOwnPInRegs; a quarter faster than config 7 on the
// H200, and slower than the seesaw tile: docs/kernels/verify_attn.md): fewer instructions a
// tile, since with 8 warps a scheduler has two warps and issue slots count (~1300 SASS
// instructions a tile a warp in config 7): the warpgroup index made warp-uniform, so that the
// descriptors are a loop-invariant base plus constants in uniform registers; the copies by
// wgmma_load_key_tile_lean; unmasked prefix tiles skip the per-element mask.
// kTma (config kVerifyBf16WgmmaTma, with kOwnPInRegs and kLean): the loads by TMA (above);
// `maps` is null otherwise.
template <class OutT, bool kOwnPInRegs, bool kLean, bool kTma>
KD_DEVICE void wgmma_attn_split(const VerifyKernelParams& k, const AttnTmaMaps* maps) {
  using Cfg = Bf16AttnWgmma;
  static_assert(!kTma || (kOwnPInRegs && kLean), "the TMA variant is built on the lean one");
  ATTN_CLK_DECL;
  KD_DYNAMIC_SMEM(uint8_t, raw);
  uint8_t* smem = raw + (kWgmmaAtomBytes - smem_u32(raw) % kWgmmaAtomBytes) % kWgmmaAtomBytes;
  uint8_t* p_s = smem + Cfg::kPOff;
  float* red_max = reinterpret_cast<float*>(smem + Cfg::kMaxOff);  // [groups][rows]
  float* red_sum = reinterpret_cast<float*>(smem + Cfg::kSumOff);  // [groups][rows]
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);
  uint64_t* full_bar = reinterpret_cast<uint64_t*>(smem + Cfg::kBarOff);  // kTma: [stages] tile landed
  uint64_t* empty_bar = full_bar + Cfg::kStages;                           // kTma: [stages] buffer free
  const uint32_t q_addr = smem_u32(smem + Cfg::kQOff), p_addr = smem_u32(p_s);
  const uint64_t q_desc = wgmma_desc_sw128(q_addr, 0, kWgmmaAtomBytes), p_desc = wgmma_desc_sw128(p_addr, 0, kWgmmaAtomBytes);

  const int tid = static_cast<int>(threadIdx.x);
  // warpgroup: S keys and O columns (lean: through a shuffle, so the compiler knows it is
  // warp-uniform and keeps what derives from it in uniform registers)
  const int group = kLean ? __shfl_sync(kFullMask, tid / Cfg::kGroupThreads, 0) : tid / Cfg::kGroupThreads;
  const int wq = (tid / kWarpSize) % 4;                 // warp within the warpgroup: 16 rows
  const int lane = tid % kWarpSize, g = lane / 4, tig = lane % 4;
  const int row_lo = 16 * wq + g, row_hi = row_lo + 8;  // this thread's accumulator rows
  if constexpr (kTma) {
    if (tid == 0) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        mbarrier_init(&full_bar[s], 1);                    // thread 0's arrive.expect_tx
        mbarrier_init(&empty_bar[s], Cfg::kGroupThreads);  // warpgroup 1's threads
      }
      fence_mbarrier_init();
      tma_prefetch_map(&maps->kv);
    }
    __syncthreads();  // the mbarriers initialised, for every thread
  }
  const SplitSchedule sched = split_schedule(k, Cfg::kTileRows, Cfg::kTileKeys, mask_s);
  const SplitWork& w = sched.w;
  const uint32_t tail_mask = sched.tail_mask;
  const int n_tiles = sched.n_tiles, prefix_tiles = sched.prefix_tiles;
  const int H = k.p.heads, T = k.p.tree_len;

  if (n_tiles == 0) {  // an empty prefix split (a shorter request): nothing visible
    write_empty_split(k, w, Cfg::kTileRows);
    return;
  }

  // visibility rows of this thread's two rows, as word offsets into vis
  int vis_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) vis_row[h] = (w.b * T + min(w.row0 + row_lo + 8 * h, k.rows - 1) / H) * k.p.vis_words;

  const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(k.p.kv) + static_cast<int64_t>(w.b) * k.p.kv_batch_stride;
  float o[Cfg::kORegs];
#pragma unroll
  for (int i = 0; i < Cfg::kORegs; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // base 2; l_run: this thread's keys

  if constexpr (kTma) {
    if (tid == 0) {  // Q and tile 0 on the first buffer's first phase
      const KeyTile t0 = key_tile_at(w, prefix_tiles, tail_mask, 0, Cfg::kTileKeys, T);
      mbarrier_arrive_expect_tx(&full_bar[0], 2 * Cfg::kTileBytes);
      tma_load_query_tile(smem + Cfg::kQOff, *maps, &full_bar[0], w.b, w.row0);
      tma_load_key_tile(smem + Cfg::kKOff, &maps->kv, &full_bar[0], w.b, t0.key0);
    }
  } else {
    wgmma_load_query_tile(smem + Cfg::kQOff, k, w.b, w.row0);
    const KeyTile t0 = key_tile_at(w, prefix_tiles, tail_mask, 0, Cfg::kTileKeys, T);
    wgmma_load_key_tile(smem + Cfg::kKOff, kv, k.p.kv_row_stride, t0.key0, t0.valid);
    cp_async_commit();
  }

  ATTN_CLK_LAP(kClkPrologue);
  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1;
    const uint32_t k_addr = smem_u32(smem + Cfg::kKOff + buf * Cfg::kTileBytes);
    const KeyTile tile = key_tile_at(w, prefix_tiles, tail_mask, it, Cfg::kTileKeys, T);
    if constexpr (kTma) {
      mbarrier_wait_parity(&full_bar[buf], (it / Cfg::kStages) & 1);  // tile `it` (and Q) landed
    } else {
      cp_async_wait<0>();
      fence_proxy_async_smem();  // the copies this thread waited for, visible to wgmma
      __syncthreads();           // tile `it` (and Q) landed for everyone; every P V of tile it-1 is complete
    }
    ATTN_CLK_LAP(kClkTop);

    // S = Q K^T for keys 32 group ..: K-major operands, 64-column blocks kBlockBytes apart,
    // 16 columns (32 bytes) a step inside the swizzle row
    float s[Cfg::kSRegs];
    const uint64_t k_desc = wgmma_desc_sw128(k_addr + group * Cfg::kKeysPerGroup * 128, 0, kWgmmaAtomBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kVerifyQKDim / 16; ++kk) {
      const uint32_t step = (kk / 4) * Cfg::kBlockBytes + (kk % 4) * 32;
      uint64_t a, b;
      if constexpr (kLean) {  // base + step / 16 in the start-address field (no carry: < 2^18 bytes)
        a = q_desc + step / 16;
        b = k_desc + step / 16;
      } else {
        a = wgmma_desc_sw128(q_addr + step, 0, kWgmmaAtomBytes);
        b = wgmma_desc_sw128(k_addr + step + group * Cfg::kKeysPerGroup * 128, 0, kWgmmaAtomBytes);
      }
      wgmma_bf16_ss<Cfg::kKeysPerGroup, false>(s, a, b, kk > 0);
    }
    wgmma_commit();
    ATTN_CLK_LAP(kClkSIssue);
    // the next tile's copies (into the buffer the P V of tile it-1 read) while S runs
    if (it + 1 < n_tiles) {
      const int nbuf = buf ^ 1;
      uint8_t* dst = smem + Cfg::kKOff + nbuf * Cfg::kTileBytes;
      if constexpr (kTma) {
        if (tid == 0) {
          const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
          // tile it-1's P V complete in warpgroup 1 (its `empty` phase (it-1) / 2); none before tile 1
          if (it >= 1) mbarrier_wait_parity(&empty_bar[nbuf], ((it - 1) / Cfg::kStages) & 1);
          mbarrier_arrive_expect_tx(&full_bar[nbuf], Cfg::kTileBytes);
          tma_load_key_tile(dst, &maps->kv, &full_bar[nbuf], w.b, nx.key0);
        }
      } else {
        const KeyTile nx = key_tile_at(w, prefix_tiles, tail_mask, it + 1, Cfg::kTileKeys, T);
        if constexpr (kLean) wgmma_load_key_tile_lean(dst, kv, k.p.kv_row_stride, nx.key0, nx.valid);
        else wgmma_load_key_tile(dst, kv, k.p.kv_row_stride, nx.key0, nx.valid);
      }
    }
    if constexpr (!kTma) cp_async_commit();
    ATTN_CLK_LAP(kClkCopyIssue);
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    if constexpr (kTma) {
      // TMA brought the rows past `valid` too (other keys, the tree, or memory past it; zero only
      // beyond the map): clear their V columns in this warpgroup's own key rows (its S has read
      // them) so that P = 0 never meets a NaN there; barrier B orders this before any P V.
      if (tile.valid < Cfg::kTileKeys) {
        const int r0 = max(tile.valid, group * Cfg::kKeysPerGroup), r1 = (group + 1) * Cfg::kKeysPerGroup;
        uint8_t* kt = smem + Cfg::kKOff + buf * Cfg::kTileBytes;
        const int gt = tid % Cfg::kGroupThreads;
        for (int idx = gt; idx < (r1 - r0) * Cfg::kLatentChunks; idx += Cfg::kGroupThreads) {
          const int r = r0 + idx / Cfg::kLatentChunks, c = idx % Cfg::kLatentChunks;  // every chunk of the row: no swizzle
          *reinterpret_cast<uint4*>(kt + (c / 8) * Cfg::kBlockBytes + r * 128 + (c % 8) * 16) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async_smem();  // the zeros, visible to wgmma (and ordered before the buffer's refill)
      }
    }
    ATTN_CLK_LAP(kClkSWait);

    // scale into the base-2 domain and mask; row maxima of this warpgroup's keys
    float mx[2];
    wgmma_mask_max<Cfg::kTileKeys>(s, tile, k, vis_row, tig, group * Cfg::kKeysPerGroup,
                   kLean && tile.tail_tile < 0 && tile.valid == Cfg::kTileKeys, mx);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (tig == 0) red_max[group * Cfg::kTileRows + row_lo + 8 * h] = mx[h];
    __syncthreads();  // both halves' maxima in
    ATTN_CLK_LAP(kClkMax);

    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_lo + 8 * h;
      const float m_tile = fmaxf(red_max[r], red_max[Cfg::kTileRows + r]);  // same order in both groups
      const float m_new = fmaxf(m_run[h], m_tile);
      alpha[h] = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m_new);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0, no NaN
      m_run[h] = m_new;
    }
    float rowsum[2] = {0.0f, 0.0f};
    uint32_t p_lo[Cfg::kSRegs / 4], p_hi[Cfg::kSRegs / 4];  // P (bf16 pairs) of rows row_lo / row_hi
#pragma unroll
    for (int j = 0; j < Cfg::kSRegs / 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[4 * j + e] = exp2f(s[4 * j + e] - m_use[e >> 1]);
        rowsum[e >> 1] += s[4 * j + e];
      }
      p_lo[j] = pack_bf16x2(s[4 * j], s[4 * j + 1]);
      p_hi[j] = pack_bf16x2(s[4 * j + 2], s[4 * j + 3]);
    }
    l_run[0] = l_run[0] * alpha[0] + rowsum[0];
    l_run[1] = l_run[1] * alpha[1] + rowsum[1];

    // O *= alpha, skipped when no row's maximum moved (x * 1 == x: bit-exact)
    if (!__all_sync(kFullMask, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
      for (int i = 0; i < Cfg::kORegs; i += 4) {
        o[i] *= alpha[0];
        o[i + 1] *= alpha[0];
        o[i + 2] *= alpha[1];
        o[i + 3] *= alpha[1];
      }
    }
#pragma unroll
    for (int j = 0; j < Cfg::kSRegs / 4; ++j) {
      const int key = group * Cfg::kKeysPerGroup + 8 * j + 2 * tig;
      *reinterpret_cast<uint32_t*>(p_s + sw128_offset(Cfg::kTileRows, row_lo, key / 8) + (key % 8) * 2) = p_lo[j];
      *reinterpret_cast<uint32_t*>(p_s + sw128_offset(Cfg::kTileRows, row_hi, key / 8) + (key % 8) * 2) = p_hi[j];
    }
    // O += P V. V N-major: 16 keys = two 8-row groups an atom apart, 256 columns = 4 blocks of
    // 64 kBlockBytes apart. P from shared memory (K-major, 32 bytes a 16-key step); with
    // kOwnPInRegs this warpgroup's own 32 keys from registers instead (the accumulator pairs
    // are the m16n8k16 A fragment), issued before the barrier that publishes P so that they
    // overlap it (and after P's stores: a wgmma's A registers are not read while in flight).
    // Waited for within the iteration, not across the loop's back edge (see
    // wgmma_fence_operand); the next tile's barrier follows.
    const uint32_t v_addr = k_addr + group * (Cfg::kColsPerGroup / 64) * Cfg::kBlockBytes;
    constexpr uint32_t kVStep = 16 * 128;  // 16 key rows
    const uint64_t v_desc = wgmma_desc_sw128(v_addr, Cfg::kBlockBytes, kWgmmaAtomBytes);
    wgmma_fence();
    if constexpr (kOwnPInRegs) {
#pragma unroll
      for (int ks = 0; ks < Cfg::kKeysPerGroup / 16; ++ks) {
        const uint32_t a[4] = {p_lo[2 * ks], p_hi[2 * ks], p_lo[2 * ks + 1], p_hi[2 * ks + 1]};
        const int key_step = group * (Cfg::kKeysPerGroup / 16) + ks;
        const uint64_t b = kLean ? v_desc + key_step * kVStep / 16
                                 : wgmma_desc_sw128(v_addr + key_step * kVStep, Cfg::kBlockBytes, kWgmmaAtomBytes);
        wgmma_bf16_rs_tb<Cfg::kColsPerGroup>(o, a, b, true);
      }
      wgmma_commit();
    }
    fence_proxy_async_smem();  // P, visible to wgmma
    __syncthreads();           // P complete
    ATTN_CLK_LAP(kClkSoftmax);
    // (the other group's key steps by arithmetic, not a branch on the group: a wgmma on a path
    // the compiler sees as divergent is serialized)
    constexpr int kSmemSteps = (kOwnPInRegs ? Cfg::kKeysPerGroup : Cfg::kTileKeys) / 16;
    const int first_step = kOwnPInRegs ? (1 - group) * (Cfg::kKeysPerGroup / 16) : 0;
#pragma unroll
    for (int i = 0; i < kSmemSteps; ++i) {
      const int ks = first_step + i;
      const uint64_t a = kLean ? p_desc + ks * 32 / 16 : wgmma_desc_sw128(p_addr + ks * 32, 0, kWgmmaAtomBytes);
      const uint64_t b = kLean ? v_desc + ks * kVStep / 16
                               : wgmma_desc_sw128(v_addr + ks * kVStep, Cfg::kBlockBytes, kWgmmaAtomBytes);
      wgmma_bf16_ss<Cfg::kColsPerGroup, true>(o, a, b, true);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    if constexpr (kTma) {
      if (group == 1) mbarrier_arrive(&empty_bar[buf]);  // warpgroup 1 is done with this buffer
    }
    ATTN_CLK_LAP(kClkPV);
  }

  // the row sums across the quad and the two warpgroups
  wgmma_publish_row_sums<Cfg>(l_run, red_sum, group, row_lo, tig);
  ATTN_CLK_LAP(kClkEpilogue);  // (the stores below are not counted)
  ATTN_CLK_FLUSH(n_tiles);
  __syncthreads();
  const int col_base = group * Cfg::kColsPerGroup;
  wgmma_store_rows<Cfg, OutT>(k, w, o, m_run, red_sum, group, row_lo, tig, col_base);
}

// Configs 6, 7, 8 (cp.async loads).
template <class OutT, bool kOwnPInRegs, bool kLean = false>
__global__ void __launch_bounds__(Bf16AttnWgmma::kThreads, 1) verify_attn_wgmma_kernel(const VerifyKernelParams k) {
#if defined(KD_WGMMA_DEVICE) || defined(KD_SIMT_EMULATION)
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  wgmma_attn_split<OutT, kOwnPInRegs, kLean, false>(k, nullptr);
#elif defined(__CUDA_ARCH__)
  __trap();  // a build without sm_90a code: the plan picks this kernel on compute capability 9.0 only
#endif
}

// Config 9 (TMA loads): the maps live in the kernel's parameter space, where the TMA unit
// reads them (__grid_constant__: never copied to local memory).
template <class OutT>
__global__ void __launch_bounds__(Bf16AttnWgmma::kThreads, 1)
    verify_attn_wgmma_tma_kernel(const VerifyKernelParams k, const __grid_constant__ AttnTmaMaps maps) {
#if defined(KD_WGMMA_DEVICE) || defined(KD_SIMT_EMULATION)
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  wgmma_attn_split<OutT, true, true, true>(k, &maps);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace kdtree::kern
