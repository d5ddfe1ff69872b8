// tree_build's one-pass search (device code; the kernel and its other searches are in
// tree_build_kernels.cuh, which tries this one first): budgets N <= 256 with K >= N, depths
// D <= 15, the rows staged in shared memory. It finds a threshold tb <= t* (the N-th best score)
// from the rows alone, before growing anything (dp_threshold, tree_build_threshold.cuh: every
// node's children come from the same row, so the number of nodes reaching a score is one count
// over rank sequences), then grows the tree ONCE at that fixed tb: every node >= tb (on the
// bench's rows ~N + 10), and the N depth-1 nodes. The search before it (to 86c8be5) raised t level by level from histograms of
// sampled nodes, with one block barrier per level; a request whose first levels grew few nodes
// then kept a low t for its deepest levels, and a batch waits for its slowest request.
//
// The growth: level 1 (the N depth-1 nodes, slots 1..N), then levels down to kOnePassSyncDepth
// grown by the whole block (a barrier per level), then each warp grows its share of the
// frontier alone. A node's children count (>= tb) is found by the thread that writes it, so a
// level is one scan, one shared atomic for room, and the writes. Every node >= tb is then in
// the pool (its parent scored at least as much), so a histogram of the pool over [tb, best]
// gives the candidates, pool nodes >= the lower edge of the N-th best's bin (~N): a bucket sort
// places each (offsets from a suffix scan, a shared atomic per candidate), and the candidates of
// a bin (a few, up to kOnePassBinCrowd) place themselves by (score desc, rank path asc): the
// total order. The rows and the visibility rows go out in one pass. It gives up (nothing
// written; the caller runs the sweep from scratch) when the pool would overflow, or the
// candidates exceed one per thread or crowd one bin (many exact ties).
#pragma once

#include "block_scan.cuh"
#include "ordered_float.cuh"
#include "tree_build_common.cuh"
#include "tree_build_threshold.cuh"

namespace kdtree::kern {

constexpr int kOnePassMaxBudget = 256;  // ranks < 256: a byte each in the rank-path key of two words
constexpr int kOnePassPoolCap = 4096;   // node slots, the root's included (12-bit parent slots)
constexpr int kOnePassCands = kTreeBuildThreads;    // candidates: one per thread when they are placed
constexpr int kOnePassBinCrowd = 192;  // more candidates in one bin: give up (exact ties; its
                                       //   candidates' order is quadratic in it; flat N=256: <= ~80)
// Levels down to this depth are grown by the whole block, a barrier each; below it each warp
// grows its share of the frontier alone. At a fixed tb a block level is a scan, a room and the
// writes, no dearer than a warp's level (phase clocks), but a warp's frontier is its
// own (the first depth-1 nodes hold most of a flat tree), so block levels spread it first.
// Two or five were slower on the H200 (docs/kernels/tree_build.md, appendix).
constexpr int kOnePassSyncDepth = 4;
static_assert(kOnePassCands >= 2 * kOnePassMaxBudget, "the candidates (~N) fit one per thread");
static_assert(kOnePassMaxBudget <= kDpBins, "dp_threshold: a thread per rank of a row");

constexpr int kOnePassBinBits = 8;      // histograms of 256 bins over a score range
constexpr int kOnePassBins = 1 << kOnePassBinBits;
constexpr int kOnePassBinsPerLane = kOnePassBins / kWarpSize;
static_assert(kOnePassBinsPerLane == 8, "a lane reads its bins of a histogram as two uint4");

using OnePassBins = ThresholdBins<kOnePassBinBits>;

// This lane's 8 bins of histogram h (a uint4 pair, read in an order that keeps the 8 lanes of
// a quarter warp on distinct bank groups), added into v.
KD_DEVICE void add_lane_bins(uint32_t (&v)[kOnePassBinsPerLane], const uint32_t* h) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const uint4* q = reinterpret_cast<const uint4*>(h + lane * kOnePassBinsPerLane);
  const int swap = (lane >> 2) & 1;  // lanes 4-7 of a quarter take their second uint4 first
  uint4 a = q[swap], b = q[1 - swap];
  if (swap) {
    const uint4 x = a;
    a = b;
    b = x;
  }
  v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w, v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
}

// Warp-collective: the first bin from the top of histogram h where the count from the top
// reaches n (-1 when none does). Lane l holds bins [8 l, 8 l + 8); each lane also finds the bin
// it would answer with before the warp knows which lane holds the n-th best, so the chain is
// the loads, one suffix scan and one shuffle. v keeps this lane's bin counts for the caller,
// *above_out (when not null) the count in the bins above this lane's.
KD_DEVICE int onepass_nth_bin(const uint32_t* h, int n, uint32_t (&v)[kOnePassBinsPerLane], int* above_out = nullptr) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int i = 0; i < kOnePassBinsPerLane; ++i) v[i] = 0;
  add_lane_bins(v, h);
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kOnePassBinsPerLane; ++i) sum += static_cast<int>(v[i]);
  int above = sum;  // scores in this lane's bins and every bin above them
#pragma unroll
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const int o = __shfl_down_sync(kFullMask, above, d);
    if (lane + d < kWarpSize) above += o;
  }
  if (above_out) *above_out = above - sum;
  int acc = above - sum, local = 0;
  bool found = false;
#pragma unroll
  for (int j = kOnePassBinsPerLane - 1; j >= 0; --j) {
    acc += static_cast<int>(v[j]);
    if (!found && acc >= n) {
      found = true;
      local = j;
    }
  }
  const unsigned reach = __ballot_sync(kFullMask, above >= n);
  if (!reach) return -1;  // warp-uniform
  const int w = 31 - __clz(static_cast<int>(reach));  // the lane whose bins hold the n-th best
  return __shfl_sync(kFullMask, lane * kOnePassBinsPerLane + local, w);
}
static_assert(kOnePassBins == kDpBins, "dp_threshold's tot is one of the search's histograms");

// node metadata: parent slot | rank << 12 | depth << 20
constexpr int kMetaRankShift = 12, kMetaDepthShift = 20;
static_assert((1 << kMetaRankShift) >= kOnePassPoolCap && (1 << (kMetaDepthShift - kMetaRankShift)) >= kOnePassMaxBudget,
              "parent slot and rank fit their fields");
static_assert(kOnePassMaxDepth < 16 && kOnePassMaxDepth < (1 << (32 - kMetaDepthShift)), "15 rank bytes and the depth");
KD_DEVICE uint32_t onepass_meta(int parent, int rank, int depth) {
  return static_cast<uint32_t>(parent) | static_cast<uint32_t>(rank) << kMetaRankShift |
         static_cast<uint32_t>(depth) << kMetaDepthShift;
}
KD_DEVICE int meta_parent(uint32_t m) { return static_cast<int>(m & ((1u << kMetaRankShift) - 1)); }
KD_DEVICE int meta_rank(uint32_t m) {
  return static_cast<int>(m >> kMetaRankShift & ((1u << (kMetaDepthShift - kMetaRankShift)) - 1));
}
KD_DEVICE int meta_depth(uint32_t m) { return static_cast<int>(m >> kMetaDepthShift & 0xFu); }

struct TreeOnePassSmem {
  float score[kOnePassPoolCap];    // slot 0 the root, then levels as they are grown
  uint32_t meta[kOnePassPoolCap];  // onepass_meta
  uint32_t dpw[2][kDpBins];        // dp_threshold's V; then the select's places and slots
  uint32_t hist[3][kOnePassBins];  // zero at the start: dp_threshold's tot, the pool's (hb), the select's cursors
  int16_t order[kOnePassCands];    // dp_threshold's rounded deltas; then the candidates' slots in the total order
  int16_t out_parent[kOnePassMaxBudget + 1];  // the rows' parents (emit_tree_rows)
  int32_t out_token[kOnePassMaxBudget];       // the rows' tokens, loaded while the candidates are ordered
  int16_t final_idx[kOnePassPoolCap];    // node index of a chosen slot (before the select: the warps' kids)
  uint32_t vis[(kOnePassMaxBudget + 1) * ceil_div(kOnePassMaxBudget + 1, kWarpSize)];  // rows on their way out
  int32_t grown[3];  // children taken per block level, by level % 3: one counted, one read, one zeroed
  int32_t first_bin;  // the N-th best's bin, the candidates' count, and the largest bin's count when over
                      //   kOnePassBinCrowd (else 0): warp 0's findings for the block
  int32_t cands;
  int32_t crowded;
  int32_t warp_grown;  // nodes the warps grew alone (below kOnePassSyncDepth)
  int32_t fail;        // a warp found the pool full
  float spine[kOnePassMaxDepth + 1];  // dp_threshold's P_d
  int32_t dp_cross[2];                // dp_threshold's smallest bin reaching N
};

// The zeros (and dp_threshold's first cross) the search starts from; the caller publishes them
// with a barrier (its staging's).
KD_DEVICE void onepass_clear(TreeOnePassSmem& s) {
  for (int i = static_cast<int>(threadIdx.x); i < kOnePassBins; i += kTreeBuildThreads)
    s.hist[0][i] = s.hist[1][i] = s.hist[2][i] = 0;
  if (threadIdx.x < 2) s.dp_cross[threadIdx.x] = kDpBins;
}

// Warp-collective: a lower bound of t* from N real nodes known without a search. The first m
// depth-1 nodes and the first j rank-0 descendants below each (m (j + 1) >= N of them) all
// score at least node m - 1's j-th (fadd of a value <= 0 never rises), so that score bounds
// t*; lane j tries j (< D) and the best bound wins. On flat rows it is far above the N-th
// best depth-1 score (bench rows, N = 256: ~-3.3 against ~-23): the floor of dp_threshold's
// range, whose bins are that range over 256.
KD_DEVICE float rectangle_bound(const float* L, int ldl, int D, int N) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int m = ceil_div(N, lane + 1);
  const float v = add_rank0_rows(__fadd_rn(0.0f, L[m - 1]), L, ldl, 1, min(lane + 1, D));
  return warp_max(lane < D ? v : -INFINITY);
}

// A warp's children counts (c <= N <= kOnePassMaxBudget), scanned: the inclusive prefix in this
// lane, the warp's sum in *total. By bit planes (one ballot each, not a chain of shuffles; a
// level's chain is this scan, a room and the writes; the shuffle scan timed within 0.1-0.3 us
// of it, docs/kernels/tree_build.md).
constexpr int kKidsBits = 9;
static_assert(kOnePassMaxBudget < (1 << kKidsBits), "a children count fits the planes");
KD_DEVICE int kids_scan(int c, int* total) { return warp_inclusive_sum_planes<kKidsBits>(c, total); }

// Children of a node scoring sf that reach t (row: the children's depth's), usually few.
KD_DEVICE int children_reaching(float sf, const float* row, int N, float t) {
  return count_leading_small(N, [&](int k) { return __fadd_rn(sf, row[k]) >= t; });
}

// A grown node into pool slot `slot`: its score, its metadata, and in kids its children count
// (>= tb; next_row: its children's row, null at the last depth), found right after its score so
// that a level starts from loads and one scan, not from searches.
KD_DEVICE void put_node(TreeOnePassSmem& s, int16_t* kids, int slot, float sc, int parent, int rank, int depth,
                        const float* next_row, int N, float tb) {
  s.score[slot] = sc;
  s.meta[slot] = onepass_meta(parent, rank, depth);
  kids[slot] = static_cast<int16_t>(next_row && sc >= tb ? children_reaching(sc, next_row, N, tb) : 0);
}

// The rank path of pool slot `slot` as a 128-bit key (a byte per depth from depth 1, the most
// significant, then the depth: a path comes before its extensions), for exact ties of score.
KD_DEVICE void rank_path_key(const TreeOnePassSmem& s, int slot, uint64_t* hi, uint64_t* lo) {
  uint64_t h = 0, l = static_cast<uint64_t>(meta_depth(s.meta[slot]));
  while (slot != 0) {
    const uint32_t m = s.meta[slot];
    const int dd = meta_depth(m);
    const uint64_t r = static_cast<uint64_t>(meta_rank(m));
    if (dd <= 8) h |= r << (8 * (8 - dd));
    else l |= r << (8 * (16 - dd));
    slot = meta_parent(m);
  }
  *hi = h;
  *lo = l;
}

// The one-pass search and order of request b, then its rows and visibility rows. Returns
// false (block-uniform; no output written) when it gives up. L: the staged rows [D, ldl]; N:
// the budget, 1..kOnePassMaxBudget, <= ldl (the first N columns are used); D: 1..
// kOnePassMaxDepth. onepass_clear's state, published by a barrier. Every thread of the block
// calls it.
KD_DEVICE bool onepass_tree(const TreeBuildParams& p, TreeOnePassSmem& s, const float* L, int ldl, int D, int N,
                            int b, int64_t tok0, int32_t root_token, int32_t start) {
  TREE_CLK_BEGIN(clk_levels);
  TREE_CLK_COUNT(kTreeClkOnePass);
  constexpr int kClk = kTreeClkOnePassDetail;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  constexpr int threads = kTreeBuildThreads;
  TREE_CLK_BEGIN(clk_step);
  // the threshold: the counting bound, over the range above the better of two bounds known
  // without a search (N depth-1 nodes reach the N-th best of them; the rectangle's)
  const float t0 = fmaxf(L[N - 1], rectangle_bound(L, ldl, D, N));
  const DpScratch dp{{s.dpw[0], s.dpw[1]}, s.hist[0], {s.order, s.order + kDpBins}, s.spine, s.dp_cross};
  const float tb = dp_threshold(dp, L, ldl, D, N, t0);
  KD_EVENT("onepass_tb", static_cast<int>(-tb * 1000.0f), static_cast<int>(-t0 * 1000.0f));
  TREE_CLK_END(clk_step, kClk + 9);

  // level 1: the N depth-1 nodes at slots 1..N in rank order; every node's children count in
  // kids (put_node; free until the select)
  TREE_CLK_RESTART(clk_step);
  int16_t* kids = s.final_idx;
  for (int k = tid; k < N; k += threads)
    put_node(s, kids, 1 + k, __fadd_rn(0.0f, L[k]), 0, k, 1, D >= 2 ? L + ldl : nullptr, N, tb);
  if (tid == 0) {
    s.score[0] = 0.0f;
    s.meta[0] = 0;
    s.grown[2] = 0;  // level 2's counter (level d counts in grown[d % 3])
    s.warp_grown = 0;
    s.fail = 0;
  }
  TREE_CLK_END(clk_step, kClk);
  TREE_CLK_RESTART(clk_step);
  __syncthreads();
  TREE_CLK_END(clk_step, kClk + 1);

  int lb = 1, le = 1 + N;  // the frontier: the last level grown
  int last = 1;            // the last level grown
  for (int d = 2; d <= min(D, kOnePassSyncDepth) && lb < le; ++d) {  // block-uniform: grow depth d from [lb, le)
    if (tid == 0) s.grown[(d + 1) % 3] = 0;  // the next level's counter
    const float* row = L + static_cast<int64_t>(d - 1) * ldl;
    const float* next_row = d < D ? row + ldl : nullptr;
    const int F = le - lb;
    for (int c0 = 0; c0 < F; c0 += threads) {  // block-uniform trips
      const int i = c0 + lane * kTreeBuildWarps + warp;  // consecutive nodes in different warps
      const bool mine = i < F;
      if (!__any_sync(kFullMask, mine)) continue;  // warp-uniform
      TREE_CLK_RESTART(clk_step);
      const float sf = mine ? s.score[lb + i] : 0.0f;
      const int c = mine ? kids[lb + i] : 0;
      TREE_CLK_END(clk_step, kClk + 3);
      TREE_CLK_RESTART(clk_step);
      int total = 0;
      const int incl = kids_scan(c, &total);
      if (total == 0) continue;  // warp-uniform
      int base = 0;
      if (lane == 0) base = atomicAdd(&s.grown[d % 3], total);
      base = le + __shfl_sync(kFullMask, base, 0);
      TREE_CLK_END(clk_step, kClk + 4);
      TREE_CLK_RESTART(clk_step);
      if (base + total > kOnePassPoolCap) continue;  // overflow: the level's count says so after the barrier
      for (int at0 = 0; at0 < total; at0 += kWarpSize) {  // warp-uniform trips
        const int at = at0 + lane;
        const int q = lane_holding(incl, at);  // the parent's lane
        const int first_q = __shfl_sync(kFullMask, incl - c, q);
        const float sq = __shfl_sync(kFullMask, sf, q);
        const int k = at - first_q;
        if (at < total)
          put_node(s, kids, base + at, __fadd_rn(sq, row[k]), lb + c0 + q * kTreeBuildWarps + warp, k, d, next_row, N, tb);
      }
      TREE_CLK_END(clk_step, kClk + 5);
    }
    TREE_CLK_RESTART(clk_step);
    __syncthreads();
    TREE_CLK_END(clk_step, kClk + 6);
    const int grown = s.grown[d % 3];
    KD_EVENT("onepass_level", d, grown);
    TREE_CLK_COUNT(kTreeClkOnePass + 2);
    if (le + grown > kOnePassPoolCap) {  // block-uniform: give up
      KD_EVENT("onepass_overflow", d, le + grown);
      TREE_CLK_COUNT(kTreeClkOnePass + 5);
      TREE_CLK_END(clk_levels, kTreeClkOnePass + 1);
      return false;
    }
    lb = le;
    le += grown;
    last = d;
  }
  TREE_CLK_END(clk_levels, kTreeClkOnePass + 1);

  TREE_CLK_BEGIN(clk_warps);
  if (lb < le && last < D) {  // block-uniform: the warps grow the rest alone
    TREE_CLK_BEGIN(clk_wstep);
    constexpr int kWClk = kTreeClkWarpDetail;
    // warp w: frontier nodes lb + w, lb + w + 16, ..., then its own children level by level,
    // each level's in one contiguous run of slots (their children counts in kids)
    int fb = lb + warp, stride = kTreeBuildWarps;
    int F = le - lb > warp ? ceil_div(le - lb - warp, stride) : 0;
    TREE_CLK_END(clk_wstep, kWClk);
    for (int d = last + 1; d <= D && F > 0; ++d) {  // warp-uniform
      TREE_CLK_RESTART(clk_wstep);
      const float* row = L + static_cast<int64_t>(d - 1) * ldl;
      const float* next_row = d < D ? row + ldl : nullptr;
      const int c_first = lane < F ? kids[fb + lane * stride] : 0;
      int tot_first = 0;
      const int incl_first = kids_scan(c_first, &tot_first);
      int total = tot_first;
      for (int i0 = kWarpSize; i0 < F; i0 += kWarpSize) {  // warp-uniform
        const int i = i0 + lane;
        total += warp_sum(i < F ? kids[fb + i * stride] : 0);
      }
      if (total == 0) break;
      int base = 0;
      if (lane == 0) base = atomicAdd(&s.warp_grown, total);
      base = le + __shfl_sync(kFullMask, base, 0);
      if (base + total > kOnePassPoolCap) {
        if (lane == 0) atomicOr(&s.fail, 1);
        break;
      }
      TREE_CLK_END(clk_wstep, kWClk + 2);
      TREE_CLK_COUNT(kWClk + 1);
      TREE_CLK_RESTART(clk_wstep);
      int at_base = base;
      for (int i0 = 0; i0 < F; i0 += kWarpSize) {  // warp-uniform
        const int i = i0 + lane;
        const int f = fb + i * stride;
        const float sf = i < F ? s.score[f] : 0.0f;
        const int c = i0 == 0 ? c_first : i < F ? kids[f] : 0;
        int tot = tot_first;
        const int incl = i0 == 0 ? incl_first : kids_scan(c, &tot);
        for (int at0 = 0; at0 < tot; at0 += kWarpSize) {  // warp-uniform
          const int at = at0 + lane;
          const int q = lane_holding(incl, at);  // the parent's lane
          const int k = at - __shfl_sync(kFullMask, incl - c, q);
          const float sq = __shfl_sync(kFullMask, sf, q);
          const int fq = __shfl_sync(kFullMask, f, q);
          if (at < tot) put_node(s, kids, at_base + at, __fadd_rn(sq, row[k]), fq, k, d, next_row, N, tb);
        }
        at_base += tot;
      }
      __syncwarp();  // the next level reads these children
      TREE_CLK_END(clk_wstep, kWClk + 3);
      KD_WARP_EVENT("warp_level", d, total);
      fb = base;
      stride = 1;
      F = total;
    }
    TREE_CLK_RESTART(clk_wstep);
    __syncthreads();
    TREE_CLK_END(clk_wstep, kWClk + 4);
    if (s.fail) {  // block-uniform
      KD_EVENT("onepass_overflow", D, kOnePassPoolCap);
      TREE_CLK_COUNT(kTreeClkOnePass + 5);
      return false;
    }
    le += s.warp_grown;
  }
  // hb: the pool's nodes >= tb, for the select (bins over [tb, best])
  const OnePassBins sel(tb, L[0]);  // L[0]: no node scores more
  uint32_t* hb = s.hist[1];
  for (int i = 1 + tid; i < le; i += threads) {
    const uint32_t key = float_to_ordered(s.score[i]);
    if (key >= float_to_ordered(tb)) atomicAdd(&hb[sel.bin(key)], 1u);
  }
  __syncthreads();
  TREE_CLK_END(clk_warps, kTreeClkOnePass + 4);
  int32_t* place = reinterpret_cast<int32_t*>(s.dpw[0]);  // free: dp_threshold is done
  uint32_t* cursor = s.hist[2];                            // zero since the start
  int16_t* by_bin = reinterpret_cast<int16_t*>(s.dpw[1]);
  static_assert(sizeof(s.dpw[1]) >= kOnePassCands * sizeof(int16_t), "the candidates by bin fit");

  // The candidates: the pool's nodes in the N-th best's bin and above (>= t* - a bin). Warp 0:
  // the bins' places (from the top) and counts.
  TREE_CLK_BEGIN(clk_select);
  TREE_CLK_RESTART(clk_step);
  if (warp == 0) {
    int acc = 0;  // place[b]: candidates in the bins above b (this lane's bins from its top one down)
    uint32_t v[kOnePassBinsPerLane];  // this lane's bin counts
    const int first = onepass_nth_bin(hb, N, v, &acc);
    int crowd = 0, cands = 0;
#pragma unroll
    for (int j = kOnePassBinsPerLane - 1; j >= 0; --j) {
      const int bin = lane * kOnePassBinsPerLane + j;
      place[bin] = acc;
      acc += static_cast<int>(v[j]);
      if (bin >= first) crowd = max(crowd, static_cast<int>(v[j]));
      if (bin == first) cands = acc;  // every candidate: the first bin and those above it
    }
    crowd = warp_max(crowd);
    cands = warp_max(cands);
    if (lane == 0) {
      s.first_bin = first;
      s.cands = cands;
      s.crowded = crowd > kOnePassBinCrowd ? crowd : 0;
    }
  }
  __syncthreads();
  TREE_CLK_END(clk_step, kClk + 7);
  const int first = s.first_bin, cands = s.cands;
  KD_EVENT("onepass_cands", cands, le);
  KD_EVENT("onepass_first", first, s.crowded);
  if (first < 0 || cands > kOnePassCands || cands < N || s.crowded) {  // block-uniform (fewer than N: t <= t*,
    TREE_CLK_COUNT(kTreeClkOnePass + 5);                               //   cannot happen)
    return false;
  }
  TREE_CLK_RESTART(clk_step);
  // each candidate into its bin's places (in any order within the bin)
  const float tf = sel.edge(first);
  // by bin: each candidate's slot, and its score's ordered bits (scanned by its bin's others)
  uint32_t* key_by_bin = s.vis;  // free until the emit
  static_assert(sizeof(s.vis) >= kOnePassCands * sizeof(uint32_t), "the candidates' keys fit the free space");
  for (int i = 1 + tid; i < le; i += threads) {
    const uint32_t key = float_to_ordered(s.score[i]);
    if (key >= float_to_ordered(tf)) {
      const int bin = static_cast<int>(sel.bin(key));
      const int at = place[bin] + static_cast<int>(atomicAdd(&cursor[bin], 1u));
      if (at < cands) {  // (always: the bins count the candidates)
        by_bin[at] = static_cast<int16_t>(i);
        key_by_bin[at] = key;
      }
    }
  }
  __syncthreads();
  TREE_CLK_END(clk_step, kClk + 8);
  TREE_CLK_END(clk_select, kTreeClkOnePass + 3);

  // the total order within each bin: a candidate's place is its bin's first plus the bin's
  // candidates before it (score desc; equal scores: rank path asc, walked only then)
  TREE_CLK_BEGIN(clk_sort);
  bool walked = false;  // an exact tie of score met
  if (tid < cands) {
    const int slot = by_bin[tid];
    const uint32_t key = key_by_bin[tid];
    const uint32_t m = s.meta[slot];  // its token's global load in flight while the bin is scanned
    const int32_t token = p.tok[tok0 + static_cast<int64_t>(meta_depth(m) - 1) * p.topk + meta_rank(m)];
    const int bin = static_cast<int>(sel.bin(key));
    const int lo = place[bin], hi = lo + static_cast<int>(hb[bin]);
    int r = 0, tied = 0;
#pragma unroll 4
    for (int q = lo; q < hi; ++q) {
      const uint32_t other = key_by_bin[q];
      r += other > key ? 1 : 0;
      tied += other == key ? 1 : 0;
    }
    if (tied > 1) {  // exact ties of score (this key counted itself): their rank paths decide
      uint64_t ph = 0, pl = 0;
      rank_path_key(s, slot, &ph, &pl);
      walked = true;
      for (int q = lo; q < hi; ++q) {
        if (q == tid || key_by_bin[q] != key) continue;
        uint64_t oh, ol;
        rank_path_key(s, by_bin[q], &oh, &ol);
        r += (oh < ph || (oh == ph && ol < pl)) ? 1 : 0;
      }
    }
    const int pos = lo + r;
    s.order[pos] = static_cast<int16_t>(slot);
    if (pos < N) {
      s.final_idx[slot] = static_cast<int16_t>(pos + 1);
      s.out_token[pos] = token;
    }
  }
  if (tid == 0) s.final_idx[0] = 0;
  if (__syncthreads_or(walked)) KD_EVENT("onepass_ties", cands, 0);
  TREE_CLK_END(clk_sort, 6);

  // the rows (emit_tree_rows), and the visibility rows' first words (the rest are zero) into
  // s.vis: a thread per row walks its ancestors (node indices fall along the walk), filling its
  // words from the last down (its token was loaded while the candidates were ordered)
  TREE_CLK_BEGIN(clk_emit);
  const int rows = p.max_nodes + 1, vw = p.vis_words;
  const int wn = ceil_div(N + 1, kWarpSize);  // words with bits in them
  if (tid < wn) s.vis[tid] = tid == 0 ? 1u : 0u;  // the root's row: itself
  emit_tree_rows(p, b, N, root_token, start, s.out_parent, [&](int i) {
    const int slot = s.order[i - 1];
    const uint32_t m = s.meta[slot];
    TreeRow r;
    r.depth = meta_depth(m);
    r.token = s.out_token[i - 1];
    r.parent = s.final_idx[meta_parent(m)];
    r.score = s.score[slot];
    int a = slot, idx = i;  // the walk: pool slot and node index of the current ancestor
    for (int w = wn - 1; w >= 0; --w) {
      uint32_t bits = 0;
      while (idx >= 0 && (idx >> 5) == w) {
        bits |= 1u << (idx & 31);
        if (a == 0) {
          idx = -1;
        } else {
          a = meta_parent(s.meta[a]);
          idx = s.final_idx[a];
        }
      }
      s.vis[i * wn + w] = bits;
    }
    return r;
  });
  TREE_CLK_END(clk_emit, 7);
  TREE_CLK_BEGIN(clk_vis);
  // out contiguously; each thread's (row, word) steps along with j, no division per word
  uint32_t* dst = p.vis + static_cast<int64_t>(b) * rows * vw;
  int row = tid / vw, w = tid - row * vw;
  const int row_step = threads / vw, w_step = threads - row_step * vw;
  for (int j = tid; j < rows * vw; j += threads) {
    dst[j] = row <= N && w < wn ? s.vis[row * wn + w] : 0u;
    row += row_step;
    w += w_step;
    if (w >= vw) {
      w -= vw;
      ++row;
    }
  }
  TREE_CLK_END(clk_vis, 8);
  return true;
}

}  // namespace kdtree::kern
