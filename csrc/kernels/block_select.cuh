// Block-wide selection: the k-th largest of n distinct 64-bit values held in shared memory
// as two 32-bit halves, v(i) = hi[i] << 32 | lo[i]. Radix select from the top with an
// adaptive digit: each round finds the highest bit where the remaining candidates differ
// (their min and max) and histograms the 8 bits below it, so clustered values (candidate
// logits share their top bits) cost as few rounds as spread ones (usually 2-3 rounds of
// 4 barriers). Every thread of the block calls it.
#pragma once

#include "block_scan.cuh"
#include "device_compat.cuh"

namespace kdtree::kern {

constexpr int kSelectBins = 256;  // 8-bit digits

struct SelectScratch {
  uint32_t hist[kSelectBins];
  uint64_t warp_min[kWarpSize], warp_max[kWarpSize];
  int bin, above;  // the chosen bin and the candidates in the bins above it
};

KD_DEVICE uint64_t select_value(const uint32_t* hi, const uint32_t* lo, int i) {
  return (static_cast<uint64_t>(hi[i]) << 32) | lo[i];
}

// k in 1..n; the values must be distinct (make the low half unique, e.g. ~index).
// slop > 0: a bound is enough. The rounds stop as soon as the bin holding the k-th has at most
// `slop` candidates and its lower end is >= floor; the result t is then that lower end:
// k <= |{v >= t}| < k + slop (a compaction that keeps a few more than k saves the rounds that
// would split that bin).
KD_DEVICE uint64_t block_select_kth_largest(const uint32_t* hi, const uint32_t* lo, int n, int k, SelectScratch& s,
                                            int slop = 0, uint64_t floor = 0) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = threads / kWarpSize;
  uint64_t known_mask = 0, known = 0;  // the bits fixed so far (a prefix from the top)
  int need = k;
  while (true) {
    // the remaining candidates' min and max
    uint64_t mn = ~uint64_t{0}, mx = 0;
    for (int i = tid; i < n; i += threads) {
      const uint64_t v = select_value(hi, lo, i);
      if ((v & known_mask) == known) {
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
      }
    }
#pragma unroll
    for (int d = kWarpSize / 2; d > 0; d >>= 1) {
      const uint64_t omn = __shfl_xor_sync(kFullMask, mn, d), omx = __shfl_xor_sync(kFullMask, mx, d);
      mn = omn < mn ? omn : mn;
      mx = omx > mx ? omx : mx;
    }
    if (lane == 0) {
      s.warp_min[warp] = mn;
      s.warp_max[warp] = mx;
    }
    for (int b = tid; b < kSelectBins; b += threads) s.hist[b] = 0;
    __syncthreads();
    for (int w = 0; w < warps; ++w) {
      mn = s.warp_min[w] < mn ? s.warp_min[w] : mn;
      mx = s.warp_max[w] > mx ? s.warp_max[w] : mx;
    }
    if (mn == mx) {  // one candidate left: it is the answer (need == 1)
      __syncthreads();  // s is reused by the next call
      return mn;
    }
    const int top = 63 - clz64(mn ^ mx);  // highest bit where candidates differ
    const int shift = top >= 7 ? top - 7 : 0;
    // bits above `top` are common to every candidate (those of mn)
    const uint64_t common_mask = top == 63 ? 0 : ~((uint64_t{2} << top) - 1);
    for (int i = tid; i < n; i += threads) {
      const uint64_t v = select_value(hi, lo, i);
      if ((v & known_mask) == known && (v & common_mask) == (mn & common_mask))
        atomicAdd(&s.hist[(v >> shift) & (kSelectBins - 1)], 1u);
    }
    __syncthreads();
    if (warp == 0) {
      // bins from the top: lane l sums bins 255-8l .. 248-8l
      constexpr int kPer = kSelectBins / kWarpSize;
      int sum = 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) sum += static_cast<int>(s.hist[kSelectBins - 1 - (lane * kPer + j)]);
      const int incl = warp_inclusive_sum(sum);
      int acc = incl - sum;
      if (acc < need && need <= incl) {
        for (int j = 0; j < kPer; ++j) {
          const int b = kSelectBins - 1 - (lane * kPer + j);
          const int h = static_cast<int>(s.hist[b]);
          if (acc + h >= need) {
            s.bin = b;
            s.above = acc;
            break;
          }
          acc += h;
        }
      }
    }
    __syncthreads();
    need -= s.above;
    const int in_bin = static_cast<int>(s.hist[s.bin]);
    const uint64_t digit_mask = static_cast<uint64_t>(kSelectBins - 1) << shift;
    known_mask = common_mask | digit_mask | known_mask;
    known = (mn & common_mask) | (static_cast<uint64_t>(s.bin) << shift);
    __syncthreads();  // s.bin / s.above are rewritten by the next round
    if (in_bin <= slop && known >= floor) return known;  // block-uniform; bits below the digit are 0
  }
}

}  // namespace kdtree::kern

namespace kdtree::kern {

// A leaner radix select (topk_logprobs' lean scan): fixed 8-bit digits from the top bit down,
// no min/max pass, two histograms taking turns, so a round is one pass and two barriers (the
// adaptive select above: two passes and four). Every thread of the block calls it; both
// histograms must be zero on entry (zero them once; each call leaves them zero).
struct SelectLeanScratch {
  uint32_t hist[2][kSelectBins];
  int bin[2], above[2], in_bin[2];  // round r's result at [r % 2]
  uint64_t found;                   // block_select_kth_largest_lean: the k-th itself
};

// Bound mode (slop >= 1): a t with k <= |{v >= t}| < k + slop and t >= floor (the lower end of
// the first digit bin holding the k-th with at most slop values; all 64 bits resolved at
// worst). The values must be distinct; k in 1..n.
KD_DEVICE uint64_t block_select_bound_lean(const uint32_t* hi, const uint32_t* lo, int n, int k, SelectLeanScratch& s, int slop,
                                           uint64_t floor = 0) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  constexpr int kDigitBits = 8;
  static_assert(kSelectBins == 1 << kDigitBits, "8-bit digits");
  uint64_t known_mask = 0, known = 0;  // the bits fixed so far (a prefix from the top)
  int need = k;
  for (int round = 0, shift = 64 - kDigitBits;; ++round, shift -= kDigitBits) {
    uint32_t* hist = s.hist[round % 2];
    for (int i = tid; i < n; i += threads) {
      const uint64_t v = select_value(hi, lo, i);
      if ((v & known_mask) == known) atomicAdd(&hist[(v >> shift) & (kSelectBins - 1)], 1u);
    }
    // the other histogram was last read (by warp 0) before the previous round's second barrier
    if (round > 0)
      for (int b = tid; b < kSelectBins; b += threads) s.hist[(round + 1) % 2][b] = 0;
    __syncthreads();
    if (warp == 0) {  // bins from the top: lane l sums bins 255-8l .. 248-8l
      constexpr int kPer = kSelectBins / kWarpSize;
      int sum = 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) sum += static_cast<int>(hist[kSelectBins - 1 - (lane * kPer + j)]);
      const int incl = warp_inclusive_sum(sum);
      int acc = incl - sum;
      if (acc < need && need <= incl) {
        for (int j = 0; j < kPer; ++j) {
          const int b = kSelectBins - 1 - (lane * kPer + j);
          const int h = static_cast<int>(hist[b]);
          if (acc + h >= need) {
            s.bin[round % 2] = b;
            s.above[round % 2] = acc;
            s.in_bin[round % 2] = h;
            break;
          }
          acc += h;
        }
      }
    }
    __syncthreads();
    // round r's result is rewritten two rounds later, after a barrier every thread passes
    // only once it has read it here
    const int bin = s.bin[round % 2], in_bin = s.in_bin[round % 2];
    need -= s.above[round % 2];
    known_mask |= static_cast<uint64_t>(kSelectBins - 1) << shift;
    known |= static_cast<uint64_t>(bin) << shift;
    if ((in_bin <= slop && known >= floor) || shift == 0) {  // block-uniform
      for (int b = tid; b < kSelectBins; b += threads) hist[b] = 0;  // read by warp 0 before the barrier above
      return known;  // bits below the digit are 0
    }
  }
}

// The k-th largest itself (distinct values, k in 1..n): the bound select down to a bin of one
// value (exactly k values are >= its bound t), then the smallest value >= t. s.found must be
// ~0 on entry (set it once; each call leaves it so).
KD_DEVICE uint64_t block_select_kth_largest_lean(const uint32_t* hi, const uint32_t* lo, int n, int k, SelectLeanScratch& s) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const uint64_t t = block_select_bound_lean(hi, lo, n, k, s, 1);
  uint64_t best = ~uint64_t{0};
  for (int i = tid; i < n; i += threads) {
    const uint64_t v = select_value(hi, lo, i);
    if (v >= t && v < best) best = v;
  }
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(kFullMask, best, d);
    best = o < best ? o : best;
  }
  if (tid % kWarpSize == 0) atomicMin(reinterpret_cast<unsigned long long*>(&s.found), static_cast<unsigned long long>(best));
  __syncthreads();
  const uint64_t kth = s.found;
  __syncthreads();  // every thread has read it: reset for the next call (after its barriers)
  if (tid == 0) s.found = ~uint64_t{0};
  return kth;
}

}  // namespace kdtree::kern
