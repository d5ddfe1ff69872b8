// Device code of topk_logprobs (host API in tree_build.cuh, launch plan in tree_build_plan.h):
// for each row of drafter logits, the K most probable tokens in (log-probability desc, token
// id asc) order with their log-probabilities, formed like python_engine/ddtree/topk.py:
// lse = max + log(sum exp(x - max)) in float64, logp = float32(x - lse).
//
// One block per row, several rows per SM, ONE read of the logits:
//   1. scan: each thread streams a float4 per step; it keeps an online (max, sum of exp) in
//      float64 (exp_f64.cuh) and appends the logits above the current threshold to a
//      candidate buffer in shared memory. When a step could overflow the buffer, the block
//      keeps the K largest (logit, lower id first) and raises the threshold to the K-th.
//      In a row in random order only ~K ln(V/K) logits ever pass.
//   2. lse from the threads' partial sums; every candidate becomes its float32 log-
//      probability, and the K largest by (logp, lower id first) are selected.
//   3. float32 rounding can give neighbouring logits the same logp, and the reference then
//      orders them by id: a dropped logit may belong to the K-th logp's group. Dropped
//      logits are all <= the last threshold, so that is checked with one logp; when it
//      could happen (rarely; always with exact ties across the cut, e.g. many -inf), the row
//      is read once more to gather that group's lowest ids.
//   4. a bitonic sort of the K winners; logp and token out.
#pragma once

#include "block_scan.cuh"
#include "block_select.cuh"
#include "block_sort.cuh"
#include "device_compat.cuh"
#include "exp_f64.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"

namespace kdtree::kern {

constexpr int kTopkThreads = 256;
constexpr int kTopkWarps = kTopkThreads / kWarpSize;
constexpr int kTopkChunk = 4 * kTopkThreads;  // logits per scan step: one float4 per thread
constexpr int kTopkBlocksPerSM = 4;           // rows resident per SM (caps registers at 64)

// Candidate slots: the K kept (rounded up so the sort keys that reuse the slack stay 8-byte
// aligned), one step's worth of new candidates and one more step of slack.
KD_HOST_DEVICE constexpr int topk_kept_slots(int k) { return round_up(k, kWarpSize); }
KD_HOST_DEVICE constexpr int topk_capacity(int k) { return topk_kept_slots(k) + 2 * kTopkChunk; }
KD_HOST_DEVICE constexpr size_t topk_smem_bytes(int k) { return static_cast<size_t>(topk_capacity(k)) * 2 * sizeof(uint32_t); }
static_assert(2 * kTopkChunk >= kTreeMaxNodes, "the sort keys of K winners fit in the buffer's slack");

struct TopkShared {
  double exp_table[kExp2TableSize];
  SelectScratch select;
  BlockScratch<double> dsum;
  BlockScratch<float> fmax;
  int count;                 // candidates in the buffer
  int eq_warp[kTopkWarps];   // re-read: tied logits per warp in this chunk
};

KD_DEVICE float logp_of(float x, double lse) { return static_cast<float>(static_cast<double>(x) - lse); }

// Keep the buffer entries for which keep(value) holds, packed to the front in any order;
// s.count becomes their number. The buffer is walked in chunks of one entry per thread: a
// chunk's kept entries land below its end, so no unread entry is overwritten.
template <class Keep>
KD_DEVICE void topk_keep_if(TopkShared& s, uint32_t* keys, uint32_t* rids, int n, Keep keep) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  if (tid == 0) s.count = 0;
  for (int base = 0; base < n; base += kTopkThreads) {
    const int i = base + tid;
    const uint32_t k = i < n ? keys[i] : 0u, r = i < n ? rids[i] : 0u;
    const bool w = i < n && keep((static_cast<uint64_t>(k) << 32) | r);
    __syncthreads();  // the chunk is read (and, the first time, the count reset)
    const unsigned ballot = __ballot_sync(kFullMask, w);
    if (ballot != 0) {  // warp-uniform
      int slot = 0;
      if (lane == 0) slot = atomicAdd(&s.count, __popc(ballot));
      slot = __shfl_sync(kFullMask, slot, 0) + __popc(ballot & ((1u << lane) - 1u));
      if (w) {
        keys[slot] = k;
        rids[slot] = r;
      }
    }
  }
  __syncthreads();
}

template <bool Vec4>
__global__ void __launch_bounds__(kTopkThreads, kTopkBlocksPerSM) topk_logprobs_kernel(const TopkLogprobsParams p) {
  __shared__ TopkShared s;
  KD_DYNAMIC_SMEM(uint32_t, buf);
  const int K = p.k, V = p.vocab;
  const int capacity = topk_capacity(K);
  uint32_t* keys = buf;             // ordered bits of the logit (from step 2: of its logp)
  uint32_t* rids = buf + capacity;  // ~token id: (key, rid) descending puts lower ids first
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  const float* x = p.logits + static_cast<int64_t>(blockIdx.x) * V;

  if (tid < kExp2TableSize) s.exp_table[tid] = kExp2Table[tid];
  if (tid == 0) s.count = 0;
  __syncthreads();

  // 1. the scan
  float m = -INFINITY;  // running max of this thread's logits
  double sum = 0.0;     // sum of exp(x - m) over them
  uint32_t thr = 0;     // candidates need an ordered key above it (0: every logit passes)
  bool dropped = false; // whether a compaction has dropped candidates (block-uniform)
  const int steps = ceil_div(V, kTopkChunk);
  auto index = [&](int step, int e) { return step * kTopkChunk + (Vec4 ? 4 * tid + e : tid + e * kTopkThreads); };
  auto load = [&](int step, float (&v)[4]) {
    if constexpr (Vec4) {
      const int i = index(step, 0);  // V % 4 == 0: a float4 is all in or all out
      const float4 f = i < V ? load_streaming(reinterpret_cast<const float4*>(x + i))
                             : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      v[0] = f.x;
      v[1] = f.y;
      v[2] = f.z;
      v[3] = f.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = index(step, e);
        v[e] = i < V ? x[i] : -INFINITY;
      }
    }
  };
  float next[4];
  load(0, next);
  for (int step = 0; step < steps; ++step) {
    float cur[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) cur[e] = next[e];
    if (step + 1 < steps) load(step + 1, next);  // in flight while this step computes
    unsigned pass = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (index(step, e) >= V) continue;
      const float v = cur[e];
      if (v > m) {  // rare after the first steps
        sum = sum * exp_nonpositive(static_cast<double>(m) - v, s.exp_table) + 1.0;
        m = v;
      } else {  // -inf - -inf is NaN, which exp_nonpositive takes as 0
        sum += exp_nonpositive(static_cast<double>(v) - m, s.exp_table);
      }
      if (float_to_ordered(v) > thr) pass |= 1u << e;
    }
    const int c = __popc(pass);
    int full = 0;
    if (__any_sync(kFullMask, c != 0)) {
      const int incl = warp_inclusive_sum(c);
      int base = 0;
      if (lane == kWarpSize - 1) base = atomicAdd(&s.count, incl);
      base = __shfl_sync(kFullMask, base, kWarpSize - 1);
      int slot = base + incl - c;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if ((pass >> e) & 1u) {
          keys[slot] = float_to_ordered(cur[e]);
          rids[slot] = ~static_cast<uint32_t>(index(step, e));
          ++slot;
        }
      // the last warp to append sees the step's final count
      if (lane == kWarpSize - 1) full = base + incl > capacity - kTopkChunk;
    }
    if (__syncthreads_or(full)) {  // the next step could overflow: keep the K largest
      const int n = s.count;
      const uint64_t kth = block_select_kth_largest(keys, rids, n, K, s.select);
      topk_keep_if(s, keys, rids, n, [kth](uint64_t v) { return v >= kth; });
      thr = static_cast<uint32_t>(kth >> 32);
      dropped = true;
    }
  }

  // 2. lse, candidates' log-probabilities, the K-th by (logp, lower id first)
  const float row_max = block_max(m, -INFINITY, s.fmax);
  const double mine = m == -INFINITY ? 0.0 : sum * exp_nonpositive(static_cast<double>(m) - row_max, s.exp_table);
  const double lse = static_cast<double>(row_max) + log(block_sum(mine, s.dsum));
  const int n = s.count;  // >= K: every logit passes until K are held
  for (int i = tid; i < n; i += kTopkThreads) keys[i] = float_to_ordered(logp_of(ordered_to_float(keys[i]), lse));
  __syncthreads();
  const uint64_t kth = block_select_kth_largest(keys, rids, n, K, s.select);
  const uint32_t kth_logp = static_cast<uint32_t>(kth >> 32);

  // 3. could a dropped logit share the K-th's logp? (they are all <= thr)
  const bool reread = dropped && float_to_ordered(logp_of(ordered_to_float(thr), lse)) >= kth_logp;
  if (!reread) {
    topk_keep_if(s, keys, rids, n, [kth](uint64_t v) { return v >= kth; });
  } else {
    // keep everything above the K-th's logp, then take its group's lowest ids from the row
    topk_keep_if(s, keys, rids, n, [kth_logp](uint64_t v) { return static_cast<uint32_t>(v >> 32) > kth_logp; });
    const int above = s.count;
    const int need = K - above;
    int seen = 0;  // tied logits met so far (block-uniform)
    for (int base = 0; base < V && seen < need; base += kTopkThreads) {
      const int i = base + tid;
      const bool eq = i < V && float_to_ordered(logp_of(x[i], lse)) == kth_logp;
      const unsigned ballot = __ballot_sync(kFullMask, eq);
      if (lane == 0) s.eq_warp[warp] = __popc(ballot);
      __syncthreads();
      int before = seen, chunk = 0;
      for (int w = 0; w < kTopkWarps; ++w) {
        if (w < warp) before += s.eq_warp[w];
        chunk += s.eq_warp[w];
      }
      const int rank = before + __popc(ballot & ((1u << lane) - 1u));
      if (eq && rank < need) {
        keys[above + rank] = kth_logp;
        rids[above + rank] = ~static_cast<uint32_t>(i);
      }
      seen += chunk;
      __syncthreads();  // eq_warp is rewritten by the next chunk
    }
  }

  // 4. sort the K winners (ascending ~(logp, rid) = the wanted order) in the buffer's slack
  uint64_t* order = reinterpret_cast<uint64_t*>(keys + topk_kept_slots(K));
  const int sort_n = block_sort_length(K);
  for (int i = tid; i < sort_n; i += kTopkThreads)
    order[i] = i < K ? ~((static_cast<uint64_t>(keys[i]) << 32) | rids[i]) : ~uint64_t{0};
  __syncthreads();
  block_sort_ascending(order, sort_n);
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * K;
  for (int i = tid; i < K; i += kTopkThreads) {
    const uint64_t v = ~order[i];
    p.logp[out0 + i] = ordered_to_float(static_cast<uint32_t>(v >> 32));
    p.tok[out0 + i] = static_cast<int32_t>(~static_cast<uint32_t>(v));
    if (p.raw) p.raw[out0 + i] = x[~static_cast<uint32_t>(v)];
  }
  if (p.lse && tid == 0) p.lse[blockIdx.x] = lse;
}

}  // namespace kdtree::kern
