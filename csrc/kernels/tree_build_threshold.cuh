// tree_build's threshold: a lower bound of t* (the N-th best score) close to it, counted from
// the rows alone before any node is grown (device code; used by tree_build_onepass.cuh).
//
// Every node at depth d takes its children from the same sorted row d, so how many nodes reach
// a score x is a count of rank sequences, the same question at every node: a dynamic program
// over a quantised budget answers it for the whole tree at once. A path r_1..r_d scores the
// spine's P_d (the rank-0 path's score) less the sum of its deltas delta_e[r_e] = row_e[0] -
// row_e[r_e] >= 0, which are 0 at rank 0, so only a path's ranks >= 1 carry quantisation
// error. With each delta rounded UP to bins of width w (q_e[k] = ceil(delta / w)):
//   V_d[b] = number of depth-d paths whose rounded deltas sum to <= b
//          = sum over ranks k with q_d[k] <= b of V_{d-1}[b - q_d[k]],  V_1[b] = #{k: q_1[k] <= b},
// and each of those paths scores at least P_d - b w >= L[0] - (off_d + b) w, off_d = the
// spine's drop from depth 1 in bins (rounded up). So tot[i] = sum over d of V_d[i - off_d]
// real nodes reach x_i = L[0] - i w: at most the real count. The highest x_i whose tot reaches
// N (less a margin for float rounding) is <= t*. On flat rows (bench rows, N = 256) it is within
// ~0.02 of t*: the candidates of the tree grown at it are N + 2..30 (the emulator, 64 requests).
//
// The cost is the longest sum of a depth (a barrier per depth), so the work is cut three ways:
// counts are capped at N and a sum stops there (a capped sum reaches N exactly when the real
// one does; the k = 0 term is V_{d-1}[b] itself, so bins past a depth's saturation take one
// step); once some tot[i] reaches N (tot only grows), no later depth needs bins past i; and a
// depth whose spine drop passes that i ends the program. Threads [0, kDpBins) compute depth d's
// V while threads [kDpBins, 2 kDpBins) round depth d + 1's deltas.
#pragma once

#include "tree_build_common.cuh"

namespace kdtree::kern {

constexpr int kOnePassMaxDepth = 15;    // depths: 15 ranks, then the depth, in a rank-path key

// v plus the rank-0 column's rows [from, to) (to <= kOnePassMaxDepth), in order: the scores
// down a rank-0 chain, the same fadds as the tree's. The loads go out together (unrolled,
// predicated), then the dependent adds.
KD_DEVICE float add_rank0_rows(float v, const float* L, int ldl, int from, int to) {
  float col[kOnePassMaxDepth];
#pragma unroll
  for (int r = 0; r < kOnePassMaxDepth; ++r) col[r] = r >= from && r < to ? L[static_cast<int64_t>(r) * ldl] : 0.0f;
#pragma unroll
  for (int r = 0; r < kOnePassMaxDepth; ++r)
    if (r >= from && r < to) v = __fadd_rn(v, col[r]);
  return v;
}

constexpr int kDpBins = 256;  // budget bins (and threshold bins): w = (L[0] - floor) / 256
static_assert(2 * kDpBins <= kTreeBuildThreads, "a thread per bin and one per rank of the next row");
constexpr int kDpSumUnroll = 4;  // a sum loads this many ranks' q at once (a latency each, not a rank)
// ranks a sum reads at most: dropping a sum's later terms lowers the count, so the bound stays a
// lower bound of t*; it only bites on rows whose deltas crowd into a few bins (logits rows sum ~70
// ranks per bin at depth 2, flat rows <= 20) and barely moves the threshold there
// (docs/kernels/tree_build.md)
constexpr int kDpMaxSumRanks = 16;
static_assert(kDpMaxSumRanks % kDpSumUnroll == 0, "whole groups");
// relative slack on float rounding: deltas, the spine's and the bound's subtractions (~1e-7
// each, 15 depths) are all far inside it
constexpr float kDpSlack = 1e-5f;

// Scratch in shared memory (the caller's; every array of the block's): tot zero and both cross
// = kDpBins, published by a barrier before the call.
struct DpScratch {
  uint32_t* v[2];   // V_{d-1}, V_d: kDpBins each
  uint32_t* tot;    // kDpBins threshold bins, from the top (L[0])
  int16_t* q[2];    // rounded deltas of two rows, N each (kDpBins: past the range)
  float* spine;     // P_0..P_D
  int32_t* cross;   // [2]: the smallest i with tot[i] >= N so far; depth d lowers cross[d % 2] and
                    //   reads the other, which nothing writes meanwhile (a value all threads agree on)
};

// Block-collective: a lower bound of t* at least `floor` (itself one), the same in every thread.
// L: the staged rows [D, ldl]; N <= kDpBins (the first N columns). Barriers: D + 1 at most.
KD_DEVICE float dp_threshold(const DpScratch& sc, const float* L, int ldl, int D, int N, float floor) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  const float range = L[0] - floor;  // a path that reaches floor has deltas summing to at most this
  if (!(range > 0.0f) || !(range < INFINITY) || N > kDpBins) return floor;  // block-uniform
  const float w = range / kDpBins, inv = kDpBins / range;
  // the rounded deltas of row d (depth d + 1) into q: thread kDpBins + k, rank k
  auto round_row = [&](int d, int16_t* q) {
    const int k = tid - kDpBins;
    if (k < 0 || k >= N) return;
    const float* row = L + static_cast<int64_t>(d) * ldl;
    const float x = __fadd_rn(row[0], -row[k]) * inv * (1.0f + kDpSlack);
    q[k] = static_cast<int16_t>(x < static_cast<float>(kDpBins) ? static_cast<int>(ceilf(x)) : kDpBins);
  };
  if (tid < kWarpSize && lane <= D) sc.spine[lane] = add_rank0_rows(0.0f, L, ldl, 0, lane);
  round_row(0, sc.q[0]);
  __syncthreads();
  const uint32_t cap = static_cast<uint32_t>(N);
  for (int d = 1; d <= D; ++d) {  // block-uniform
    const int cross = sc.cross[(d - 1) % 2];  // through depth d - 1
    if (tid == 0) atomicMin(&sc.cross[d % 2], cross);
    // bins from the top where depth d's paths start: the spine's drop, rounded up
    const float off_f = __fadd_rn(L[0], -sc.spine[d]) * inv * (1.0f + kDpSlack);
    if (!(off_f < static_cast<float>(cross))) break;  // depth d and below reach no bin still needed
    const int off = static_cast<int>(ceilf(off_f));
    const int16_t* q = sc.q[(d - 1) % 2];
    if (tid < kDpBins) {
      const int b = tid;
      if (off + b <= min(cross, kDpBins - 1)) {
        uint32_t sum = 0;
        if (d == 1) {
          sum = static_cast<uint32_t>(count_leading(N, [&](int k) { return q[k] <= b; }));
        } else {
          const uint32_t* vp = sc.v[d % 2];
          const int ranks = min(N, kDpMaxSumRanks);
          for (int k0 = 0; k0 < ranks && sum < cap; k0 += kDpSumUnroll) {
            int qk[kDpSumUnroll];
#pragma unroll
            for (int u = 0; u < kDpSumUnroll; ++u) qk[u] = k0 + u < ranks ? q[k0 + u] : kDpBins;
            bool past = false;
#pragma unroll
            for (int u = 0; u < kDpSumUnroll; ++u) {
              past = past || qk[u] > b;
              if (!past) sum += vp[b - qk[u]];
            }
            if (past) break;
          }
        }
        sum = min(sum, cap);
        sc.v[(d + 1) % 2][b] = sum;
        const uint32_t t = sc.tot[off + b] + sum;  // this thread's bin at this depth: no other writes it
        sc.tot[off + b] = t;
        if (t >= cap) atomicMin(&sc.cross[d % 2], off + b);
      }
    } else if (d < D) {
      round_row(d, sc.q[d % 2]);
    }
    __syncthreads();
  }
  const int i = min(sc.cross[0], sc.cross[1]);  // steps of w below L[0]
  if (i >= kDpBins) return floor;
  const float x = __fadd_rn(L[0], -static_cast<float>(i) * w);
  return fmaxf(floor, x - kDpSlack * (fabsf(x) + range));
}

}  // namespace kdtree::kern
