// Block-wide ascending sort of 64-bit keys in shared memory: a bitonic network whose short
// strides run in registers (up to 8 keys per thread) and warp shuffles, so only strides past
// a warp's keys pay a __syncthreads: 256 or 512 keys take 6 barriers instead of 36 or 45,
// 2048 keys 10 instead of 66. Every thread of the block calls it.
#pragma once

#include "device_compat.cuh"

namespace kdtree::kern {

namespace sort_detail {

// Compare-exchange of this thread's keys e and e ^ J (J < E: both in registers, element
// i = t * E + e); J is a template argument so the array indices are constants.
template <int E, int J>
KD_DEVICE void in_thread_step(uint64_t (&r)[E], int t, int k) {
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int f = e ^ J;
    if (f > e) {
      const bool ascending = ((t * E + e) & k) == 0;
      if ((r[e] > r[f]) == ascending) {
        const uint64_t x = r[e];
        r[e] = r[f];
        r[f] = x;
      }
    }
  }
}

// One compare-exchange step of stage (k, j) on this thread's E consecutive keys (element
// i = t * E + e): j < E inside the thread, j < 32 E with the partner thread's lane.
template <int E>
KD_DEVICE void register_step(uint64_t (&r)[E], int t, int k, int j) {
  if (j < E) {
    if constexpr (E > 4) if (j == 4) in_thread_step<E, 4>(r, t, k);
    if constexpr (E > 2) if (j == 2) in_thread_step<E, 2>(r, t, k);
    if constexpr (E > 1) if (j == 1) in_thread_step<E, 1>(r, t, k);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const uint64_t other = __shfl_xor_sync(kFullMask, r[e], j / E);
      const int i = t * E + e;
      const bool ascending = (i & k) == 0;
      const bool lower = i < (i ^ j);
      const uint64_t lo = r[e] < other ? r[e] : other, hi = r[e] < other ? other : r[e];
      r[e] = lower == ascending ? lo : hi;
    }
  }
}

// The stages j = j_top .. 1 of merge level k, in registers.
template <int E>
KD_DEVICE void register_steps(uint64_t (&r)[E], int t, int k, int j_top) {
  for (int j = j_top; j > 0; j >>= 1) register_step<E>(r, t, k, j);
}

template <int E>
KD_DEVICE void sort_with(uint64_t* keys, int n) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int used = n / E;  // threads holding keys: a multiple of 32 (n >= 32)
  const bool active = tid < used;  // warp-uniform
  const int reg_span = 32 * E;     // strides below this stay inside a warp
  uint64_t r[E];
  if (active)
#pragma unroll
    for (int e = 0; e < E; ++e) r[e] = keys[tid * E + e];
  const int k_reg = n < reg_span ? n : reg_span;
  if (active)
    for (int k = 2; k <= k_reg; k <<= 1) register_steps<E>(r, tid, k, k >> 1);
  for (int k = 2 * reg_span; k <= n; k <<= 1) {
    if (active)
#pragma unroll
      for (int e = 0; e < E; ++e) keys[tid * E + e] = r[e];
    __syncthreads();
    for (int j = k >> 1; j >= reg_span; j >>= 1) {
      for (int p = tid; p < n / 2; p += threads) {
        const int i = (p / j) * 2 * j + p % j;  // the lower element of pair p
        const int q = i + j;
        const uint64_t a = keys[i], b = keys[q];
        if ((a > b) == ((i & k) == 0)) {
          keys[i] = b;
          keys[q] = a;
        }
      }
      __syncthreads();
    }
    if (active) {
#pragma unroll
      for (int e = 0; e < E; ++e) r[e] = keys[tid * E + e];
      register_steps<E>(r, tid, k, reg_span >> 1);
    }
  }
  if (active)
#pragma unroll
    for (int e = 0; e < E; ++e) keys[tid * E + e] = r[e];
  __syncthreads();
}

}  // namespace sort_detail

// Keys per thread: at least n / threads, and up to 8 so that the keys sit in 4 warps or fewer
// where possible: more of the network then runs in registers (a smem stage costs a barrier;
// idle warps cost nothing).
// Sort keys[0, n) ascending. n: a power of two, 32 <= n <= 8 * blockDim.x; pad with
// ~0ull to get there. Ends with a barrier (the sorted keys are visible to every thread).
KD_DEVICE void block_sort_ascending(uint64_t* keys, int n) {
  const int threads = static_cast<int>(blockDim.x);
  int per_thread = n > threads ? n / threads : 1;
  while (per_thread < 8 && n / (per_thread * kWarpSize) > 4) per_thread *= 2;
  switch (per_thread) {
    case 1: sort_detail::sort_with<1>(keys, n); break;
    case 2: sort_detail::sort_with<2>(keys, n); break;
    case 4: sort_detail::sort_with<4>(keys, n); break;
    default: sort_detail::sort_with<8>(keys, n); break;
  }
}

// The padded length block_sort_ascending needs for `count` keys.
KD_DEVICE int block_sort_length(int count) {
  int n = 32;
  while (n < count) n <<= 1;
  return n;
}

}  // namespace kdtree::kern
