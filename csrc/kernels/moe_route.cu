// Router, grouping and combine kernels of the MoE block (API: moe_route.cuh).
#include "block_scan.cuh"
#include "moe_route.cuh"

namespace kdtree {
namespace kern {

// The lane holding the largest value (lowest index on ties); idx -1 when no lane has one.
KD_DEVICE void warp_argmax(float* v, int* idx) {
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, *v, d);
    const int oi = __shfl_xor_sync(kFullMask, *idx, d);
    const bool take = oi >= 0 && (*idx < 0 || ov > *v || (ov == *v && oi < *idx));
    if (take) {
      *v = ov;
      *idx = oi;
    }
  }
}

constexpr float kNegInf = -__builtin_huge_valf();

// One warp per token. choice (s + bias) lives in shared memory, one row per warp; chosen
// experts are struck out with -inf, ineligible ones (outside the chosen groups) too.
__global__ void __launch_bounds__(kRowThreads) moe_route_kernel(const MoeRouteParams p) {
  __shared__ float choice_s[kRowWarps][kMoeMaxExperts];
  __shared__ float group_s[kRowWarps][kMoeMaxGroups];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int t = static_cast<int>(blockIdx.x) * kRowWarps + warp;
  if (t >= p.tokens) return;
  float* choice = choice_s[warp];
  const float* logits = p.logits + static_cast<int64_t>(t) * p.experts;
  for (int e = lane; e < p.experts; e += kWarpSize) {
    const float c = 1.0f / (1.0f + expf(-logits[e])) + p.bias[e];
    choice[e] = c == c ? c : kNegInf;  // a NaN score is never chosen over a number
  }
  __syncwarp();
  if (p.topk_group < p.groups) {
    const int per = p.experts / p.groups;
    if (lane < p.groups) {  // group score: the sum of its two best choices
      float a = kNegInf, b = kNegInf;
      for (int e = lane * per; e < (lane + 1) * per; ++e) {
        const float c = choice[e];
        if (c > a) {
          b = a;
          a = c;
        } else if (c > b) {
          b = c;
        }
      }
      group_s[warp][lane] = a + b;
    }
    __syncwarp();
    unsigned chosen = 0;  // bit g: group g selected
    for (int i = 0; i < p.topk_group; ++i) {
      float v = lane < p.groups && !((chosen >> lane) & 1u) ? group_s[warp][lane] : kNegInf;
      int idx = lane < p.groups && !((chosen >> lane) & 1u) ? lane : -1;
      warp_argmax(&v, &idx);
      if (idx < 0) break;
      chosen |= 1u << idx;
    }
    for (int e = lane; e < p.experts; e += kWarpSize)
      if (!((chosen >> (e / per)) & 1u)) choice[e] = kNegInf;
    __syncwarp();
  }
  float total = 0.0f;
  for (int j = 0; j < p.topk; ++j) {
    float v = kNegInf;
    int idx = -1;
    for (int e = lane; e < p.experts; e += kWarpSize) {
      const float c = choice[e];  // -inf: chosen already, or outside the chosen groups
      if (c != kNegInf && (idx < 0 || c > v)) {
        v = c;
        idx = e;
      }
    }
    warp_argmax(&v, &idx);
    __syncwarp();
    if (idx < 0) idx = j;  // only when every score is NaN: any distinct in-range ids will do
    const float s = 1.0f / (1.0f + expf(-logits[idx]));
    if (lane == 0) {
      p.topk_ids[static_cast<int64_t>(t) * p.topk + j] = idx;
      p.topk_weights[static_cast<int64_t>(t) * p.topk + j] = s;
      choice[idx] = kNegInf;
    }
    total += s;
    __syncwarp();
  }
  if (lane == 0) {
    float* w = p.topk_weights + static_cast<int64_t>(t) * p.topk;
    for (int j = 0; j < p.topk; ++j) w[j] = (p.norm_topk ? w[j] / (total + 1e-20f) : w[j]) * p.scaling;
  }
}

constexpr int kGroupThreads = 1024;

// The whole grouping in one block: count per expert, offsets, then each pair's row. The
// order of rows within an expert is whatever the atomics give; every row is computed on its
// own, so the results do not depend on it.
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const MoeGroupParams p) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int offset[kMoeMaxExperts + 1];
  __shared__ int listed;  // experts in the active list
  const int tid = static_cast<int>(threadIdx.x);
  const int pairs = p.tokens * p.topk;
  for (int e = tid; e < p.experts; e += kGroupThreads) count[e] = 0;
  __syncthreads();
  for (int i = tid; i < pairs; i += kGroupThreads) atomicAdd(&count[p.topk_ids[i]], 1);
  __syncthreads();
  if (tid == 0) {  // experts are few (<= kMoeMaxExperts): a serial scan is cheaper than a tree
    int run = 0;
    for (int e = 0; e < p.experts; ++e) {
      offset[e] = run;
      run += count[e];
      count[e] = 0;  // from here on: the expert's fill cursor
    }
    offset[p.experts] = run;
  }
  __syncthreads();
  if (p.active_experts) {  // warp 0 ranks the experts that own rows by ballots, 32 at a time
    const int begin = p.active_begin, end = p.active_end > 0 ? p.active_end : p.experts;
    if (tid < kWarpSize) {
      int n = 0;
      for (int e0 = begin; e0 < end; e0 += kWarpSize) {
        const int e = e0 + tid;
        const bool has = e < end && offset[e + 1] > offset[e];
        const unsigned bits = __ballot_sync(kFullMask, has);
        if (has) p.active_experts[n + __popc(bits & ((1u << tid) - 1u))] = e - begin;
        n += __popc(bits);
      }
      if (tid == 0) listed = n;
    }
    __syncthreads();
    for (int i = listed + tid; i < end - begin; i += kGroupThreads) p.active_experts[i] = -1;
  }
  for (int e = tid; e <= p.experts; e += kGroupThreads) p.offsets[e] = offset[e];
  for (int i = tid; i < pairs; i += kGroupThreads) {
    const int e = p.topk_ids[i];
    const int row = offset[e] + atomicAdd(&count[e], 1);
    p.row_token[row] = i / p.topk;
    p.pair_row[i] = row;
  }
}

template <class T>
__global__ void __launch_bounds__(kElementThreads) moe_combine_kernel(const MoeCombineParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.tokens) * p.hidden) return;
  const int t = static_cast<int>(idx / p.hidden), c = static_cast<int>(idx % p.hidden);
  const T* y = static_cast<const T*>(p.expert_out);
  float acc = 0.0f;
  for (int j = 0; j < p.topk; ++j) {
    const int pair = t * p.topk + j;
    if (p.topk_ids && (p.topk_ids[pair] < p.expert_begin || p.topk_ids[pair] >= p.expert_end)) continue;
    acc += to_f32(y[static_cast<int64_t>(p.pair_row[pair]) * p.hidden + c]) * p.topk_weights[pair];
  }
  float v = round_to<T>(acc);
  if (p.shared_out) v += to_f32(static_cast<const T*>(p.shared_out)[idx]);
  static_cast<T*>(p.out)[idx] = from_f32<T>(v);
}

}  // namespace kern

KernelResult moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (KernelResult r = check_moe_route_params(p); !r.ok()) return r;
  if (p.tokens == 0) return KernelResult::success();
  KD_LAUNCH(kern::moe_route_kernel, kern::ceil_div(p.tokens, kern::kRowWarps), kern::kRowThreads, 0, stream, p);
  return launch_status("moe_route_kernel launch");
}

KernelResult moe_group(const MoeGroupParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.experts < 1 || p.experts > kMoeMaxExperts || p.topk < 1)
    return KernelResult::invalid("moe_group: tokens >= 0, experts in 1.." + std::to_string(kMoeMaxExperts) +
                                 " and topk >= 1 required");
  if (!p.topk_ids || !p.offsets || !p.row_token || !p.pair_row)
    return KernelResult::invalid("moe_group: topk_ids, offsets, row_token and pair_row must be non-null");
  if (p.active_experts && (p.active_begin < 0 || p.active_end > p.experts || (p.active_end > 0 && p.active_end <= p.active_begin)))
    return KernelResult::invalid("moe_group: active experts range [" + std::to_string(p.active_begin) + ", " +
                                 std::to_string(p.active_end) + ") outside the " + std::to_string(p.experts) + " experts");
  KD_LAUNCH(kern::moe_group_kernel, 1, kern::kGroupThreads, 0, stream, p);
  return launch_status("moe_group_kernel launch");
}

KernelResult moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.hidden < 1 || p.topk < 1)
    return KernelResult::invalid("moe_combine: tokens >= 0, hidden >= 1 and topk >= 1 required");
  if (p.tokens == 0) return KernelResult::success();
  if (!p.expert_out || !p.pair_row || !p.topk_weights || !p.out)
    return KernelResult::invalid("moe_combine: expert_out, pair_row, topk_weights and out must be non-null");
  const int blocks = static_cast<int>(kern::ceil_div<int64_t>(static_cast<int64_t>(p.tokens) * p.hidden,
                                                              kern::kElementThreads));
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::moe_combine_kernel<T>, blocks, kern::kElementThreads, 0, stream, p));
  return launch_status("moe_combine_kernel launch");
}

}  // namespace kdtree
