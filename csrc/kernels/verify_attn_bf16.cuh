// The shared-memory layout and copies of the mma.sync verify_attn tiles (the decode kernel,
// verify_attn_decode.cuh; the mma tile baselines, csrc/dev/verify_attn_mma_tile.cuh): query and
// key rows of 72 16-byte chunks, XOR-swizzled by chunk so that ldmatrix is conflict-free, filled
// by cp.async; P tiles likewise.
#pragma once

#include "ptx_mma.cuh"
#include "verify_attn_common.cuh"
#include "verify_attn_plan.h"

namespace kdtree::kern {

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

// Issue cp.async copies of `rows` cache rows starting at `key0` (rows >= valid zero-filled),
// by threads [first, first + count) of the CTA (the caller's thread is one of them).
template <class Cfg>
KD_DEVICE void load_key_tile(uint8_t* dst, const __nv_bfloat16* kv, int64_t row_stride, int key0, int valid,
                             int first = 0, int count = Cfg::kThreads) {
  for (int idx = static_cast<int>(threadIdx.x) - first; idx < Cfg::kTileKeys * Cfg::kChunks; idx += count) {
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

}  // namespace kdtree::kern
