// A probe of the TMA wrappers (kernels/ptx_tma.cuh, kernels/tma_map.h) independent of any
// attention kernel: the bf16 tensor map with the 128-byte swizzle that verify_attn's TMA wgmma tile (config 9)
// loads its key tiles with, checked byte for byte against the layout its wgmma descriptors
// read (kern::sw128_offset). Run by test_verify_attn on a GPU of compute capability 9.0+ and by
// emu_verify_attn_test on the SIMT emulator (the same kernel source), so a wrong box, stride,
// swizzle or mbarrier phase shows here, not as a wrong attention row.
//
// The tensor: kTmaProbeBatch requests of kTmaProbeRows rows of 576 bf16, rows padded to
// kTmaProbeRowStride elements, requests a spare row apart. Two fills of one 64-row tile of 9
// boxes (64 columns each) on one mbarrier: request 1 from row 40 (rows past the tensor read as
// zero), then request 0 from row 0 (the mbarrier's second phase).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ptx_tma.cuh"

namespace kdtree::test {

constexpr int kTmaProbeCols = 576, kTmaProbeRows = 70, kTmaProbeBatch = 2;
constexpr int kTmaProbeRowStride = 584;                                   // elements: 8 of padding per row
constexpr int kTmaProbeBatchStride = (kTmaProbeRows + 1) * kTmaProbeRowStride;  // a spare row between requests
constexpr int kTmaProbeBoxRows = 64, kTmaProbeBoxCols = 64;
constexpr int kTmaProbeThreads = 128;
constexpr uint32_t kTmaProbeTileBytes = kTmaProbeBoxRows * kTmaProbeCols * 2;
constexpr size_t kTmaProbeSmemBytes = kTmaProbeTileBytes + 16 + kern::kWgmmaAtomBytes;  // tile, mbarrier, alignment slack
constexpr int kTmaProbeFills = 2;
constexpr int kTmaProbeTailRow = 40;  // fill 0: request 1 from this row (30 rows inside, 34 past the end)

inline std::vector<uint16_t> tma_probe_input(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> v(static_cast<size_t>(kTmaProbeBatch) * kTmaProbeBatchStride);
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());  // any bits: the copy moves bytes
  return v;
}

inline KernelResult tma_probe_map(TmaMap* map, const void* src) {
  constexpr uint64_t kBf16 = 2;
  return encode_tma_map_bf16_3d(map, src, {kTmaProbeCols, kTmaProbeRows, kTmaProbeBatch},
                                {kTmaProbeRowStride * kBf16, kTmaProbeBatchStride * kBf16},
                                {kTmaProbeBoxCols, kTmaProbeBoxRows, 1}, "tma probe");
}

// mismatches[f] = 16-byte chunks of fill f that differ from the expected swizzled layout.
__global__ void __launch_bounds__(kTmaProbeThreads) tma_probe_kernel(const __grid_constant__ TmaMap map,
                                                                     const uint16_t* src, int* mismatches) {
#if defined(KD_TMA_DEVICE) || defined(KD_SIMT_EMULATION)
  using namespace kern;
  KD_DYNAMIC_SMEM(uint8_t, raw);
  uint8_t* tile = raw + (kWgmmaAtomBytes - smem_u32(raw) % kWgmmaAtomBytes) % kWgmmaAtomBytes;
  uint64_t* bar = reinterpret_cast<uint64_t*>(tile + kTmaProbeTileBytes);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  for (int f = 0; f < kTmaProbeFills; ++f) {
    const int b = f == 0 ? 1 : 0, row0 = f == 0 ? kTmaProbeTailRow : 0;  // fill 1: request 0 from row 0
    if (tid == 0) {
      mbarrier_arrive_expect_tx(bar, kTmaProbeTileBytes);
      for (int blk = 0; blk < kTmaProbeCols / kTmaProbeBoxCols; ++blk)
        tma_load_3d(tile + blk * kTmaProbeBoxRows * 128, &map, bar, blk * kTmaProbeBoxCols, row0, b);
    }
    mbarrier_wait_parity(bar, static_cast<uint32_t>(f & 1));
    int bad = 0;
    for (int idx = tid; idx < kTmaProbeBoxRows * kTmaProbeCols / 8; idx += kTmaProbeThreads) {
      const int r = idx / (kTmaProbeCols / 8), c = idx % (kTmaProbeCols / 8);
      uint16_t want[8] = {};
      if (row0 + r < kTmaProbeRows)
        for (int e = 0; e < 8; ++e)
          want[e] = src[static_cast<int64_t>(b) * kTmaProbeBatchStride + (row0 + r) * kTmaProbeRowStride + c * 8 + e];
      const uint16_t* got = reinterpret_cast<const uint16_t*>(tile + sw128_offset(kTmaProbeBoxRows, r, c));
      for (int e = 0; e < 8; ++e)
        if (got[e] != want[e]) {
          ++bad;
          break;
        }
    }
    if (bad) atomicAdd(&mismatches[f], bad);
    __syncthreads();  // every thread has read the tile before the next fill
  }
#endif
}

}  // namespace kdtree::test
