#include "vocab_merge.cuh"

#include <climits>
#include <cmath>
#include <string>

#include "block_sort.cuh"
#include "device_compat.cuh"
#include "float_pair.cuh"
#include "launch_support.h"
#include "ordered_float.cuh"
#include "tree_build.cuh"

namespace kdtree {
namespace kern {

constexpr int kArgmaxThreads = 256;  // one block per row: a slice of up to ~10^5 logits
constexpr int kMergeThreads = 1024;  // block_sort_ascending sorts up to 8 keys a thread: 8 parts x 1024
constexpr int kSortKeysPerThread = 8;
constexpr int kSortMinKeys = 32;       // block_sort_ascending's smallest length
constexpr int kNoId = INT_MAX;       // a part whose row holds only NaN offers nothing

KD_DEVICE bool beats(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__global__ void __launch_bounds__(kArgmaxThreads) part_argmax_kernel(const PartArgmaxParams p) {
  __shared__ float best_val[kArgmaxThreads / kWarpSize];
  __shared__ int best_idx[kArgmaxThreads / kWarpSize];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.stride;
  float bv = -INFINITY;
  int bi = kNoId;
  for (int i = tid; i < p.cols; i += kArgmaxThreads)
    if (beats(row[i], i, bv, bi)) {  // NaN compares false: never taken
      bv = row[i];
      bi = i;
    }
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, bv, d);
    const int oi = __shfl_xor_sync(kFullMask, bi, d);
    if (beats(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    best_val[warp] = bv;
    best_idx[warp] = bi;
  }
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kArgmaxThreads / kWarpSize; ++w)
      if (beats(best_val[w], best_idx[w], bv, bi)) {
        bv = best_val[w];
        bi = best_idx[w];
      }
    static_cast<float*>(p.out)[blockIdx.x] = bv;
    reinterpret_cast<int32_t*>(static_cast<char*>(p.out) + p.rows * sizeof(float))[blockIdx.x] =
        bi == kNoId ? kNoId : p.id_base + bi;
  }
}

__global__ void merge_argmax_kernel(const MergeArgmaxParams p) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.rows) return;
  float bv = -INFINITY;
  int bi = kNoId;
  for (int q = 0; q < p.parts; ++q) {
    const char* block = static_cast<const char*>(p.gathered) + q * argmax_part_bytes(p.rows);
    const float v = reinterpret_cast<const float*>(block)[r];
    const int i = reinterpret_cast<const int32_t*>(block + p.rows * sizeof(float))[r];
    if (beats(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  p.choice[r] = bi == kNoId ? 0 : bi;  // only NaN everywhere: token 0, as the whole row's argmax
}

// One block per row: the parts' lse (float pairs, as topk_logprobs forms them) combined in
// pairs (rank order: the same on every rank), every candidate's logp recomputed from its logit
// against it as topk_logprobs rounds it, a bitonic sort of the parts x k keys, the first k out.
__global__ void __launch_bounds__(kMergeThreads) merge_topk_kernel(const MergeTopkParams p, int sort_n) {
  KD_DYNAMIC_SMEM(uint64_t, keys);
  const int r = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  const size_t part_bytes = topk_part_bytes(p.rows, p.k), kk = static_cast<size_t>(p.rows) * p.k;
  auto block = [&](int q) { return static_cast<const char*>(p.gathered) + q * part_bytes; };
  auto lse_of = [&](int q) {
    const float* pair = reinterpret_cast<const float*>(block(q) + kk * 8) + 2 * r;
    return FloatPair(pair[0], pair[1]);
  };
  FloatPair m(-INFINITY);  // the largest part lse (by its high part)
  for (int q = 0; q < p.parts; ++q)
    if (lse_of(q).hi > m.hi) m = lse_of(q);
  const PairTableGlobal table;
  FloatPair sum{};  // sum of e^(lse_q - m) >= 1
  for (int q = 0; q < p.parts; ++q) {
    const FloatPair l = lse_of(q);
    const FloatPair d = two_sum(l.hi, -m.hi);
    sum = pair_add(sum, exp_pair(FloatPair(d.hi, __fadd_rn(d.lo, __fadd_rn(l.lo, -m.lo))), table));
  }
  const FloatPair log_sum = pair_log(sum, table);
  const FloatPair top = two_sum(m.hi, log_sum.hi);
  const FloatPair lse = pair_round_to_double(fast_two_sum(top.hi, __fadd_rn(top.lo, __fadd_rn(m.lo, log_sum.lo))));
  const int n = p.parts * p.k;
  for (int i = tid; i < sort_n; i += kMergeThreads) {
    if (i >= n) {
      keys[i] = ~uint64_t{0};  // padding sorts last
      continue;
    }
    const int q = i / p.k, j = i % p.k;
    const size_t at = static_cast<size_t>(r) * p.k + j;
    const float raw = reinterpret_cast<const float*>(block(q))[at];
    const int32_t tok = reinterpret_cast<const int32_t*>(block(q) + kk * 4)[at];
    const float logp = logp_of_pair(raw, lse);
    const uint32_t id = static_cast<uint32_t>(tok + q * p.part_vocab);
    // topk_logprobs' order: ascending ~(ordered logp, ~id) = logp descending, lower id first
    keys[i] = ~((static_cast<uint64_t>(float_to_ordered(logp)) << 32) | ~id);
  }
  __syncthreads();
  block_sort_ascending(keys, sort_n);
  const int64_t out0 = static_cast<int64_t>(r) * p.k;
  for (int i = tid; i < p.k; i += kMergeThreads) {
    const uint64_t v = ~keys[i];
    p.logp[out0 + i] = ordered_to_float(static_cast<uint32_t>(v >> 32));
    p.out_tok[out0 + i] = static_cast<int32_t>(~static_cast<uint32_t>(v));
  }
}

}  // namespace kern

KernelResult part_argmax(const PartArgmaxParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 1 || p.stride < p.cols || !p.logits || !p.out)
    return KernelResult::invalid("part_argmax: rows >= 0, cols >= 1, stride >= cols and every buffer required");
  if (p.rows == 0) return KernelResult::success();
  KD_LAUNCH(kern::part_argmax_kernel, p.rows, kern::kArgmaxThreads, 0, stream, p);
  return launch_status("part_argmax_kernel launch");
}

KernelResult merge_argmax(const MergeArgmaxParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.parts < 1 || p.parts > kVocabMaxParts || !p.gathered || !p.choice)
    return KernelResult::invalid("merge_argmax: rows >= 0, parts 1.." + std::to_string(kVocabMaxParts) +
                                 " and every buffer required");
  if (p.rows == 0) return KernelResult::success();
  constexpr int kRowsPerBlock = 256;
  KD_LAUNCH(kern::merge_argmax_kernel, kern::ceil_div(p.rows, kRowsPerBlock), kRowsPerBlock, 0, stream, p);
  return launch_status("merge_argmax_kernel launch");
}

KernelResult merge_topk(const MergeTopkParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.parts < 1 || p.parts > kVocabMaxParts || p.k < 1 || p.k > kTreeMaxNodes || p.part_vocab < p.k ||
      !p.gathered || !p.logp || !p.out_tok)
    return KernelResult::invalid("merge_topk: rows >= 0, parts 1.." + std::to_string(kVocabMaxParts) + ", k 1.." +
                                 std::to_string(kTreeMaxNodes) + " and <= part_vocab, every buffer required");
  if (p.rows == 0) return KernelResult::success();
  int sort_n = kern::kSortMinKeys;  // block_sort_ascending's length: a power of two
  while (sort_n < p.parts * p.k) sort_n <<= 1;
  if (sort_n > kern::kSortKeysPerThread * kern::kMergeThreads)
    return KernelResult::over_limit("merge_topk: " + std::to_string(p.parts * p.k) + " candidates a row");
  const size_t smem = static_cast<size_t>(sort_n) * sizeof(uint64_t);
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kern::merge_topk_kernel), smem, "merge_topk");
      !r.ok())
    return r;
  KD_LAUNCH(kern::merge_topk_kernel, p.rows, kern::kMergeThreads, smem, stream, p, sort_n);
  return launch_status("merge_topk_kernel launch");
}

}  // namespace kdtree
