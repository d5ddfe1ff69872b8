// Device code of topk_logprobs (host API in tree_build.cuh): for each row of drafter
// logits, the K most probable tokens in (log-probability desc, token id asc) order and their
// log-probabilities, formed like python_engine/ddtree/topk.py: lse = max + log(sum exp(x -
// max)) in float64, logp = float32(x - lse). One block per row:
//   1. one pass: online (max, sum of exp) per thread in float64, and a histogram of the top
//      11 bits of every logit's ordered bit pattern;
//   2. radix select (11 + 11 + 10 bits) of the K-th largest bit pattern u*;
//   3. gather: every logit above u*, and the lowest-id ones equal to u* (ranked in id order
//      with ballots), then a bitonic sort of the K (key, id) pairs.
#pragma once

#include "block_scan.cuh"
#include "device_compat.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"

namespace kdtree::kern {

constexpr int kTopkThreads = 512;
constexpr int kTopkBins = 2048;  // 11-bit radix digits

// The bin where the running count (from bin 0 = the largest digit) first reaches `need`:
// writes the bin and the count in the bins before it. Warp 0 only; nbins a multiple of 32.
KD_DEVICE void select_bin(const uint32_t* hist, int nbins, int need, int* bin_out, int* before_out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int per = nbins / kWarpSize;
  int sum = 0;
  for (int j = 0; j < per; ++j) sum += static_cast<int>(hist[lane * per + j]);
  const int incl = warp_inclusive_sum(sum);
  int acc = incl - sum;
  if (acc < need && need <= incl) {
    for (int j = 0; j < per; ++j) {
      const int h = static_cast<int>(hist[lane * per + j]);
      if (acc + h >= need) {
        *bin_out = lane * per + j;
        *before_out = acc;
        break;
      }
      acc += h;
    }
  }
}

__global__ void __launch_bounds__(kTopkThreads) topk_logprobs_kernel(const TopkLogprobsParams p) {
  __shared__ uint32_t hist[kTopkBins];  // bin 0 holds the largest digit
  __shared__ uint64_t keys[kTreeMaxNodes];  // ~((ordered << 32) | ~id): ascending = wanted order
  __shared__ BlockScratch<float> fscratch;
  __shared__ BlockScratch<double> dscratch;
  __shared__ int warp_eq[kWarpSize];
  __shared__ int sel_bin, sel_before, n_gt;

  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = threads / kWarpSize;
  const int V = p.vocab, K = p.k;
  const float* x = p.logits + static_cast<int64_t>(blockIdx.x) * V;

  for (int i = tid; i < kTopkBins; i += threads) hist[i] = 0;
  if (tid == 0) n_gt = 0;
  __syncthreads();

  // 1. online max / sum of exp (float64) and the first-digit histogram
  float m = -INFINITY;
  double sum = 0.0;
  for (int i = tid; i < V; i += threads) {
    const float v = x[i];
    if (v > m) {
      sum = (m == -INFINITY) ? 0.0 : sum * exp(static_cast<double>(m) - static_cast<double>(v));
      m = v;
    }
    if (v != -INFINITY) sum += exp(static_cast<double>(v) - static_cast<double>(m));
    atomicAdd(&hist[kTopkBins - 1 - (float_to_ordered(v) >> 21)], 1u);
  }
  const float row_max = block_max(m, -INFINITY, fscratch);
  const double mine = (m == -INFINITY) ? 0.0 : sum * exp(static_cast<double>(m) - static_cast<double>(row_max));
  const double total = block_sum(mine, dscratch);
  const double lse = static_cast<double>(row_max) + log(total);

  // 2. radix select of the K-th largest ordered pattern
  int need = K;
  if (warp == 0) select_bin(hist, kTopkBins, need, &sel_bin, &sel_before);
  __syncthreads();
  const uint32_t d1 = static_cast<uint32_t>(kTopkBins - 1 - sel_bin);
  need -= sel_before;
  __syncthreads();
  for (int i = tid; i < kTopkBins; i += threads) hist[i] = 0;
  __syncthreads();
  for (int i = tid; i < V; i += threads) {
    const uint32_t key = float_to_ordered(x[i]);
    if ((key >> 21) == d1) atomicAdd(&hist[kTopkBins - 1 - ((key >> 10) & 0x7ffu)], 1u);
  }
  __syncthreads();
  if (warp == 0) select_bin(hist, kTopkBins, need, &sel_bin, &sel_before);
  __syncthreads();
  const uint32_t d2 = static_cast<uint32_t>(kTopkBins - 1 - sel_bin);
  need -= sel_before;
  __syncthreads();
  for (int i = tid; i < kTopkBins; i += threads) hist[i] = 0;
  __syncthreads();
  const uint32_t prefix = (d1 << 11) | d2;
  for (int i = tid; i < V; i += threads) {
    const uint32_t key = float_to_ordered(x[i]);
    if ((key >> 10) == prefix) atomicAdd(&hist[1023 - (key & 0x3ffu)], 1u);
  }
  __syncthreads();
  if (warp == 0) select_bin(hist, 1024, need, &sel_bin, &sel_before);
  __syncthreads();
  const uint32_t thr = (prefix << 10) | static_cast<uint32_t>(1023 - sel_bin);
  const int need_eq = need - sel_before;  // how many logits equal to u* are taken, lowest ids first
  const int count_gt = K - need_eq;

  // 3. gather, then sort
  int eq_seen = 0;
  for (int base = 0; base < V; base += threads) {
    const int i = base + tid;
    const uint32_t key = i < V ? float_to_ordered(x[i]) : 0u;
    const uint64_t packed = ~((static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(i)));
    if (i < V && key > thr) keys[atomicAdd(&n_gt, 1)] = packed;
    const bool eq = i < V && key == thr;
    const unsigned ballot = __ballot_sync(kFullMask, eq);
    if (lane == 0) warp_eq[warp] = __popc(ballot);
    __syncthreads();
    int before = eq_seen, chunk = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) before += warp_eq[w];
      chunk += warp_eq[w];
    }
    const int rank = before + __popc(ballot & ((1u << lane) - 1u));
    if (eq && rank < need_eq) keys[count_gt + rank] = packed;
    eq_seen += chunk;
    __syncthreads();
  }
  int sort_n = 1;
  while (sort_n < K) sort_n <<= 1;
  for (int i = K + tid; i < sort_n; i += threads) keys[i] = ~uint64_t{0};
  __syncthreads();
  block_bitonic_sort(keys, sort_n);
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * K;
  for (int i = tid; i < K; i += threads) {
    const uint64_t packed = ~keys[i];
    const float v = ordered_to_float(static_cast<uint32_t>(packed >> 32));
    p.logp[out0 + i] = static_cast<float>(static_cast<double>(v) - lse);
    p.tok[out0 + i] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(packed & 0xffffffffu));
  }
}

}  // namespace kdtree::kern
