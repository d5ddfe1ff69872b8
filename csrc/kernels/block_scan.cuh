// Block-wide prefix sums and reductions over shared-memory arrays, for kernels whose every
// thread calls them together (they contain __syncthreads).
#pragma once

#include <type_traits>

#include "device_compat.cuh"

namespace kdtree::kern {

template <class T>
KD_DEVICE T warp_inclusive_sum(T v) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const T up = __shfl_up_sync(kFullMask, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// redux.sync (one instruction for a warp's sum or bitwise or) from sm_80 on; shuffles before.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define KD_WARP_REDUX 1
#else
#define KD_WARP_REDUX 0
#endif

KD_DEVICE unsigned warp_or(unsigned v) {
#if KD_WARP_REDUX
  return __reduce_or_sync(kFullMask, v);
#else
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) v |= __shfl_xor_sync(kFullMask, v, d);
  return v;
#endif
}

// Warp-collective inclusive prefix sum of small non-negative ints, v < 2^kBits, from one
// ballot per bit plane: the ballots do not wait on each other (warp_inclusive_sum's five
// shuffles do), so a scan costs about one vote's latency. Planes no lane sets are skipped
// (the or of the warp's values, one redux). *total: the warp's sum, in every lane.
template <int kBits>
KD_DEVICE int warp_inclusive_sum_planes(int v, int* total) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const unsigned upto = 0xffffffffu >> (kWarpSize - 1 - lane);  // lanes <= this one
  const unsigned planes = warp_or(static_cast<unsigned>(v));
  int incl = 0, all = 0;
#pragma unroll
  for (int j = 0; j < kBits; ++j) {
    if ((planes >> j) == 0) break;  // warp-uniform
    const unsigned set = __ballot_sync(kFullMask, (v >> j) & 1);
    incl += __popc(set & upto) << j;
    all += __popc(set) << j;
  }
  *total = all;
  return incl;
}

template <class T>
KD_DEVICE T warp_sum(T v) {
  if constexpr (KD_WARP_REDUX && sizeof(T) == 4 && std::is_integral_v<T>) {
    return __reduce_add_sync(kFullMask, v);
  } else {
#pragma unroll
    for (int d = kWarpSize / 2; d > 0; d >>= 1) v += __shfl_xor_sync(kFullMask, v, d);
    return v;
  }
}

template <class T>
KD_DEVICE T warp_max(T v) {
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const T o = __shfl_xor_sync(kFullMask, v, d);
    v = o > v ? o : v;
  }
  return v;
}

// Scratch for the block-wide helpers: one slot per warp plus a broadcast slot.
template <class T>
struct BlockScratch {
  T warp[kWarpSize];
  T total;
};

// out[i] = in[0] + ... + in[i-1] for i < n (in and out may alias); returns the total.
// Threads = blockDim.x (a multiple of 32); each handles two consecutive items per round.
template <class T>
KD_DEVICE T block_exclusive_scan(const T* in, T* out, int n, BlockScratch<T>& s) {
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = threads / kWarpSize;
  T carry = 0;
  for (int base = 0; base < n; base += 2 * threads) {
    const int i0 = base + 2 * tid;
    const T a = i0 < n ? in[i0] : T(0);
    const T b = i0 + 1 < n ? in[i0 + 1] : T(0);
    const T local = a + b;
    const T incl = warp_inclusive_sum(local);
    if (lane == kWarpSize - 1) s.warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const T w = lane < warps ? s.warp[lane] : T(0);
      const T wi = warp_inclusive_sum(w);
      if (lane < warps) s.warp[lane] = wi;
    }
    __syncthreads();
    const T excl = carry + (warp > 0 ? s.warp[warp - 1] : T(0)) + incl - local;
    if (i0 < n) out[i0] = excl;
    if (i0 + 1 < n) out[i0 + 1] = excl + a;
    carry += s.warp[warps - 1];
    __syncthreads();  // s.warp is rewritten by the next round (or the next call)
  }
  return carry;
}

// Sum of one value per thread, returned to every thread.
template <class T>
KD_DEVICE T block_sum(T v, BlockScratch<T>& s) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) s.warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? s.warp[lane] : T(0);
    w = warp_sum(w);
    if (lane == 0) s.total = w;
  }
  __syncthreads();
  const T total = s.total;
  __syncthreads();  // s is reused by the next call
  return total;
}

// Maximum of one value per thread (`lowest` fills idle lanes), returned to every thread.
template <class T>
KD_DEVICE T block_max(T v, T lowest, BlockScratch<T>& s) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_max(v);
  if (lane == 0) s.warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? s.warp[lane] : lowest;
    w = warp_max(w);
    if (lane == 0) s.total = w;
  }
  __syncthreads();
  const T total = s.total;
  __syncthreads();
  return total;
}

// Ascending in-place bitonic sort of keys[0, n) in shared memory; n a power of two.
template <class K>
KD_DEVICE void block_bitonic_sort(K* keys, int n) {
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < n; i += threads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const K a = keys[i], b = keys[ixj];
          const bool ascending = (i & k) == 0;
          if ((a > b) == ascending) {
            keys[i] = b;
            keys[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

}  // namespace kdtree::kern
