// A probe of the wgmma wrappers (kernels/ptx_wgmma.cuh) against a plain matmul, independent
// of any attention kernel: the operand layouts verify_attn's wgmma kernel uses, on random
// bf16 inputs. Run by test_verify_attn on an sm_90 GPU and by emu_verify_attn_test on the
// SIMT emulator (the same kernel source), so a descriptor, swizzle or fragment mistake shows
// as one wrong product here, not as a wrong attention row.
//
//   s    = A B^T       (64 x 64): A, B K-major (rows x 64 dims), 4 k-steps of m64n64k16,
//                       descriptors advanced 32 bytes per step inside the swizzle row
//   s_hi = A B[32:]^T  (64 x 32): m64n32k16 on B's rows 32..63 (descriptor at row 32)
//   o_ss = P V         (64 x 256): P K-major (64 x 64 keys), V N-major (64 keys x 256 columns
//                       stored as 4 blocks of 64 columns), m64n256k16, transposed B
//   o_rs = P V         the same with P in registers (the m16n8k16 A fragment)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/ptx_wgmma.cuh"

namespace kdtree::test {

constexpr int kProbeRows = 64;   // M, and the keys of B / P / V
constexpr int kProbeDim = 64;    // K of s = A B^T: one swizzle row
constexpr int kProbeCols = 256;  // N of o = P V
constexpr int kProbeThreads = 128;
constexpr uint32_t kProbeTileBytes = kProbeRows * 128;  // a 64-row, 64-column bf16 tile
constexpr uint32_t kProbeA = 0, kProbeB = kProbeTileBytes, kProbeP = 2 * kProbeTileBytes, kProbeV = 3 * kProbeTileBytes;
constexpr size_t kProbeSmemBytes = 7 * kProbeTileBytes + kern::kWgmmaAtomBytes;  // + alignment slack

struct WgmmaProbeIO {
  const uint16_t *a, *b, *p, *v;  // row-major bf16 bits: a, b, p [64][64], v [64][256]
  float *s, *s_hi, *o_ss, *o_rs;   // row-major results
};

// Stores a row-major [rows][cols] bf16 matrix at `tile` in the 128-byte-swizzle layout.
KD_DEVICE void probe_store(uint8_t* tile, const uint16_t* src, int rows, int cols) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * cols / 8; idx += kProbeThreads) {
    const int r = idx / (cols / 8), c = idx % (cols / 8);
    std::memcpy(tile + kern::sw128_offset(rows, r, c), src + r * cols + c * 8, 16);
  }
}

// D fragment element e of column tile j of this thread -> (row, column)
KD_DEVICE void probe_put(float* out, int cols, const float* d, int n) {
  const int t = static_cast<int>(threadIdx.x), w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (int j = 0; j < n / 8; ++j)
    for (int e = 0; e < 4; ++e) out[(16 * w + g + 8 * (e >> 1)) * cols + 8 * j + 2 * q + (e & 1)] = d[4 * j + e];
}

__global__ void __launch_bounds__(kProbeThreads) wgmma_probe_kernel(const WgmmaProbeIO io) {
#if defined(KD_WGMMA_DEVICE) || defined(KD_SIMT_EMULATION)
  using namespace kern;
  KD_DYNAMIC_SMEM(uint8_t, raw);
  uint8_t* smem = raw + (kWgmmaAtomBytes - smem_u32(raw) % kWgmmaAtomBytes) % kWgmmaAtomBytes;
  probe_store(smem + kProbeA, io.a, kProbeRows, kProbeDim);
  probe_store(smem + kProbeB, io.b, kProbeRows, kProbeDim);
  probe_store(smem + kProbeP, io.p, kProbeRows, kProbeRows);
  probe_store(smem + kProbeV, io.v, kProbeRows, kProbeCols);
  fence_proxy_async_smem();
  __syncthreads();
  const uint32_t base = smem_u32(smem);
  float s[32], s_hi[16], o_ss[128], o_rs[128];
  wgmma_fence();
  for (int kk = 0; kk < kProbeDim / 16; ++kk) {
    const uint64_t a = wgmma_desc_sw128(base + kProbeA + 32 * kk, 0, kWgmmaAtomBytes);
    wgmma_bf16_ss<64, false>(s, a, wgmma_desc_sw128(base + kProbeB + 32 * kk, 0, kWgmmaAtomBytes), kk > 0);
    wgmma_bf16_ss<32, false>(s_hi, a, wgmma_desc_sw128(base + kProbeB + 32 * 128 + 32 * kk, 0, kWgmmaAtomBytes), kk > 0);
  }
  for (int ks = 0; ks < kProbeRows / 16; ++ks) {
    // V: 16 keys = two 8-row groups (sbo apart), 256 columns = 4 blocks of 64 (lbo apart)
    const uint64_t v = wgmma_desc_sw128(base + kProbeV + 16 * 128 * ks, kProbeTileBytes, kWgmmaAtomBytes);
    wgmma_bf16_ss<256, true>(o_ss, wgmma_desc_sw128(base + kProbeP + 32 * ks, 0, kWgmmaAtomBytes), v, ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  // P in registers: rows 16 w + g (+ 8), keys 16 ks + 2 q (+ 1) (+ 8)
  const int t = static_cast<int>(threadIdx.x), w = t / 32, g = (t % 32) / 4, q = t % 4;
  auto pair = [&](int r, int k) { return static_cast<uint32_t>(io.p[r * 64 + k]) | (static_cast<uint32_t>(io.p[r * 64 + k + 1]) << 16); };
  wgmma_fence();
  for (int ks = 0; ks < kProbeRows / 16; ++ks) {
    const int r = 16 * w + g, k = 16 * ks + 2 * q;
    const uint32_t a[4] = {pair(r, k), pair(r + 8, k), pair(r, k + 8), pair(r + 8, k + 8)};
    const uint64_t v = wgmma_desc_sw128(base + kProbeV + 16 * 128 * ks, kProbeTileBytes, kWgmmaAtomBytes);
    wgmma_bf16_rs_tb<256>(o_rs, a, v, ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  probe_put(io.s, kProbeRows, s, 64);
  probe_put(io.s_hi, 32, s_hi, 32);
  probe_put(io.o_ss, kProbeCols, o_ss, 256);
  probe_put(io.o_rs, kProbeCols, o_rs, 256);
#endif
}

// Host side: random inputs and the double-precision products.
struct WgmmaProbeHost {
  std::vector<uint16_t> a, b, p, v;
  std::vector<float> s, s_hi, o_ss, o_rs;

  explicit WgmmaProbeHost(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](std::vector<uint16_t>& m, size_t n) {
      m.resize(n);
      for (auto& x : m) {
        const float f = u(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        x = static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 will do
      }
    };
    fill(a, kProbeRows * kProbeDim);
    fill(b, kProbeRows * kProbeDim);
    fill(p, kProbeRows * kProbeRows);
    fill(v, kProbeRows * kProbeCols);
    s.assign(kProbeRows * kProbeRows, NAN);
    s_hi.assign(kProbeRows * 32, NAN);
    o_ss.assign(kProbeRows * kProbeCols, NAN);
    o_rs.assign(kProbeRows * kProbeCols, NAN);
  }

  static double f(uint16_t x) {
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float r;
    std::memcpy(&r, &bits, 4);
    return r;
  }

  // Mismatches (printed, up to a few): |got - exact| > 1e-4 * sum |products| + 1e-6.
  int check() const {
    int bad = 0;
    auto cmp = [&](const char* what, float got, double exact, double mag, int r, int c) {
      if (std::fabs(got - exact) <= 1e-4 * mag + 1e-6) return;
      if (bad++ < 8) std::printf("      wgmma probe %s[%d][%d] = %.6f, expected %.6f\n", what, r, c, got, exact);
    };
    for (int r = 0; r < kProbeRows; ++r)
      for (int c = 0; c < kProbeRows; ++c) {
        double e = 0, m = 0;
        for (int k = 0; k < kProbeDim; ++k) {
          e += f(a[r * kProbeDim + k]) * f(b[c * kProbeDim + k]);
          m += std::fabs(f(a[r * kProbeDim + k]) * f(b[c * kProbeDim + k]));
        }
        cmp("s", s[r * kProbeRows + c], e, m, r, c);
        if (c >= 32) cmp("s_hi", s_hi[r * 32 + c - 32], e, m, r, c - 32);
      }
    for (int r = 0; r < kProbeRows; ++r)
      for (int c = 0; c < kProbeCols; ++c) {
        double e = 0, m = 0;
        for (int k = 0; k < kProbeRows; ++k) {
          e += f(p[r * kProbeRows + k]) * f(v[k * kProbeCols + c]);
          m += std::fabs(f(p[r * kProbeRows + k]) * f(v[k * kProbeCols + c]));
        }
        cmp("o_ss", o_ss[r * kProbeCols + c], e, m, r, c);
        cmp("o_rs", o_rs[r * kProbeCols + c], e, m, r, c);
      }
    return bad;
  }
};

}  // namespace kdtree::test
