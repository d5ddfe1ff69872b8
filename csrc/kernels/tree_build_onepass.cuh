// tree_build's one-pass search (device code; the kernel and its other searches are in
// tree_build_kernels.cuh, which tries this one first): budgets N <= 256 with K >= N, depths
// D <= 15, the rows staged in shared memory. It grows the tree ONCE, level by level, at a
// threshold t that rises every level, with one block barrier per level; the sweep it replaces
// regrew levels after raises and needed two barriers per level (NOTES.md).
//
// t is always a lower bound of t* (the N-th best score): the N-th best, to a histogram bin's
// lower edge, of a set of distinct real nodes. The set: the "spine family" (spine_count: the
// root's rank-0 chain, and each node one rank >= 1 off it with its first kSpineChain rank-0
// descendants; known before any level is grown, it makes the first t ~-1.2 on flat rows where
// the rectangle's is ~-3), then every node grown with two ranks >= 1 or more on its path, and
// below each one its chain of rank-0 descendants (x0, x00, ...) while they reach t. A node is
// its "sample root" (the last node of rank >= 1 on its path) followed by zeros, and only sample
// roots add themselves and their chains (for a root one rank off the spine, its family chain
// ends after kSpineChain zeros and the node one further down goes on as a root:
// spine_sample_root), so each real node is counted at most once: a node of rank 0 that is grown
// was counted in its sample root's chain, since it reaches today's t, which is at least the t
// it was counted at. Each level's
// samples go into a histogram of their own (X, three taking turns: one filled, one read, one
// zeroed), and the levels before are summed in another (C, two taking turns: level d reads one
// and writes the other as C + X of level d - 1), so no histogram is read and added to in one
// phase, and no sample is added twice.
//
// A level: each frontier node counts its children >= t (a prefix of its row: a search that
// stops early for the usual few children), its warp takes room for its nodes' children in the
// pool with one shared atomic and writes them (a lane per child, its parent found among the
// warp's lanes by a shuffle search), then samples them; then the block barrier. Consecutive
// frontier nodes go to different warps: a level's first nodes, which often hold most of its
// children, do not all land in one warp. Below kOnePassSyncDepth each warp goes on alone with
// its share (see there). The family's floor (its histogram's lower end) is the better of two
// bounds known without a search: the N-th best depth-1 score, and the "rectangle" of the first
// depth-1 nodes and their first rank-0 descendants (rectangle_bound).
//
// When the last level is empty, every node >= t* is in the pool (its parent scored at least
// as much, so it was grown at every t <= t*), and it was sampled: the histogram's bins at and
// above the N-th best's hold exactly the candidates, pool nodes >= the final t (~N: t is within
// a bin of t*). So the bins give each candidate its place up to its bin (a bucket sort: offsets
// from a suffix scan, a shared atomic per candidate), and the candidates of a bin (a few, up to
// kOnePassBinCrowd) place themselves by (score desc, rank path asc): the total order. The rows
// and the visibility rows go out in one pass. It gives up (nothing written; the caller runs the sweep from
// scratch) when the pool would overflow, or the candidates exceed one per thread or crowd one
// bin (many exact ties).
#pragma once

#include "block_scan.cuh"
#include "ordered_float.cuh"
#include "tree_build_common.cuh"

namespace kdtree::kern {

constexpr int kOnePassMaxBudget = 256;  // ranks < 256: a byte each in the rank-path key ...
constexpr int kOnePassMaxDepth = 15;    // ... of two words: 15 ranks, then the depth
constexpr int kOnePassPoolCap = 4096;   // node slots, the root's included (12-bit parent slots)
constexpr int kOnePassBinBits = 8;      // t to 1/256 of the range [first t, best score] in
constexpr int kOnePassBins = 1 << kOnePassBinBits;  //   ordered bits: ~N + 20 candidates
constexpr int kOnePassCands = kTreeBuildThreads;    // candidates: one per thread when they are placed
constexpr int kOnePassBinCrowd = 192;  // more candidates in one bin: give up (exact ties; its
                                       //   candidates' order is quadratic in it; flat N=256: <= ~80)
// Levels down to this depth are grown by the whole block with t rising every level; below it,
// each warp grows its share of the frontier alone at the t reached (no block barrier, no
// sample), and a fresh histogram of the pool serves the select. A block level cost 2-5 K cycles
// on the H200 (phase clocks, NOTES.md). On flat rows (N = 256) t is then close enough to t* that
// the pool grows by ~10%; freezing it after depth 3 grows the pool tenfold (a Python model of
// the search).
constexpr int kOnePassSyncDepth = 4;
// -DKD_ONEPASS_NO_SPINE: the first t without the spine family (the search before it; for A/B
// builds, scripts/tree_variants_ab.sh)
constexpr int kOnePassBinsPerLane = kOnePassBins / kWarpSize;
static_assert(kOnePassBinsPerLane == 8, "a lane reads its bins of a histogram as two uint4");
static_assert(kOnePassCands >= 2 * kOnePassMaxBudget, "the candidates (~N) fit one per thread");

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
// How far a node's path leaves the spine (spine_count, spine_sample): bits 24-25 its ranks >= 1, counted to 2
// (kOffSpine*), bits 26-29 the depth of its rank >= 1 when there is exactly one
constexpr int kMetaOffShift = 24, kMetaOffDepthShift = 26;
constexpr uint32_t kOffSpineNone = 0, kOffSpineOne = 1, kOffSpineMore = 2;
KD_DEVICE uint32_t meta_off(uint32_t m) { return m >> kMetaOffShift & 3u; }
KD_DEVICE int meta_off_depth(uint32_t m) { return static_cast<int>(m >> kMetaOffDepthShift & 0xFu); }
// the off-spine bits of a child of rank k at depth d whose parent's meta is mp
KD_DEVICE uint32_t child_off_bits(uint32_t mp, int k, int d) {
  const uint32_t off = meta_off(mp);
  if (k == 0) return mp & (0xFu << kMetaOffDepthShift | 3u << kMetaOffShift);  // the parent's
  if (off == kOffSpineNone) return kOffSpineOne << kMetaOffShift | static_cast<uint32_t>(d) << kMetaOffDepthShift;
  return kOffSpineMore << kMetaOffShift;
}

struct TreeOnePassSmem {
  float score[kOnePassPoolCap];    // slot 0 the root, then levels as they are grown
  uint32_t meta[kOnePassPoolCap];  // onepass_meta
  uint32_t cum[2][kOnePassBins];   // C: the samples of the levels before the last (see above)
  uint32_t lvl[3][kOnePassBins];   // X: one level's samples
  int16_t order[kOnePassCands];    // the candidates' slots: by bin, then in the total order
  int16_t out_parent[kOnePassMaxBudget + 1];  // the rows' parents (emit_tree_rows)
  int32_t out_token[kOnePassMaxBudget];       // the rows' tokens, loaded while the candidates are ordered
  int16_t final_idx[kOnePassPoolCap];    // node index of a chosen slot (before the select: the warps' kids)
  uint32_t vis[(kOnePassMaxBudget + 1) * ceil_div(kOnePassMaxBudget + 1, kWarpSize)];  // rows on their way out
  int32_t grown[3];  // children taken per level, by level % 3: one counted, one read, one zeroed
  int32_t first_bin;  // the N-th best's bin, the candidates' count, and the largest bin's count when over
                      //   kOnePassBinCrowd (else 0): warp 0's findings for the block
  int32_t cands;
  int32_t crowded;
  int32_t warp_grown;  // nodes the warps grew alone (below kOnePassSyncDepth)
  int32_t fail;        // a warp found the pool full
  float spine[kOnePassMaxDepth + 1];        // the spine's scores, by depth (spine_count, spine_sample)
  int32_t spine_ranks[kOnePassMaxDepth + 1];  // ranks k at depth d whose node off the spine reaches the floor
};

using OnePassBins = ThresholdBins<kOnePassBinBits>;

// This lane's 8 bins of histogram h (a uint4 pair, read in an order that keeps the 8 lanes of
// a quarter warp on distinct bank groups), added into v.
KD_DEVICE void add_lane_bins(uint32_t (&v)[kOnePassBinsPerLane], const uint32_t* h) {
  if (!h) return;
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

// Warp-collective: the first bin from the top of the histogram h1 + h2 (h2 may be null) where the count from
// the top reaches n (-1 when none does), and in *cnt (when not null) that bin's count. Lane l
// holds bins [8 l, 8 l + 8); each lane also finds the bin it would answer with before the warp
// knows which lane holds the n-th best, so the chain is the loads, one suffix scan and one
// shuffle. v keeps this lane's bin counts for the caller, *above_out (when not null) the count
// in the bins above this lane's.
KD_DEVICE int onepass_nth_bin(const uint32_t* h1, const uint32_t* h2, int n, uint32_t (&v)[kOnePassBinsPerLane],
                              int* above_out = nullptr) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int i = 0; i < kOnePassBinsPerLane; ++i) v[i] = 0;
  add_lane_bins(v, h1);
  add_lane_bins(v, h2);
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

// A node scoring v at depth d, and its chain of rank-0 descendants (rows d.. of L) while they
// reach t, into histogram h. The rank-0 column's values are loaded kChainBatch at a time, ahead
// of the adds and atomics (which the compiler would not move loads across).
constexpr int kChainBatch = 4;
KD_DEVICE void sample_chain(uint32_t* h, const OnePassBins& bins, float v, int d, float t, const float* L, int ldl,
                            int D) {
  atomicAdd(&h[bins.bin(float_to_ordered(v))], 1u);
  for (int r0 = d; r0 < D; r0 += kChainBatch) {
    float col[kChainBatch];
#pragma unroll
    for (int j = 0; j < kChainBatch; ++j) col[j] = r0 + j < D ? L[static_cast<int64_t>(r0 + j) * ldl] : 0.0f;
    bool alive = true;
#pragma unroll
    for (int j = 0; j < kChainBatch; ++j) {
      if (alive && r0 + j < D) {
        v = __fadd_rn(v, col[j]);
        alive = v >= t;
        if (alive) atomicAdd(&h[bins.bin(float_to_ordered(v))], 1u);
      }
    }
    if (!alive) break;
  }
}

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

// Warp-collective: a lower bound of t* from N real nodes known without a search. The first m
// depth-1 nodes and the first j rank-0 descendants below each (m (j + 1) >= N of them) all
// score at least node m - 1's j-th (fadd of a value <= 0 never rises), so that score bounds
// t*; lane j tries j (< D) and the best bound wins. On flat rows it is far above the N-th
// best depth-1 score (bench rows, N = 256: ~-3.3 against ~-23): the spine family's floor, so
// that family stays a few thousand nodes.
KD_DEVICE float rectangle_bound(const float* L, int ldl, int D, int N) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int m = ceil_div(N, lane + 1);
  const float v = add_rank0_rows(__fadd_rn(0.0f, L[m - 1]), L, ldl, 1, min(lane + 1, D));
  return warp_max(lane < D ? v : -INFINITY);
}

// The spine family's nodes one rank off the spine carry at most this many rank-0 descendants
// into spine_sample's histogram; the tree samples the rest of such a chain itself, from the
// descendant one further down (spine_sample_root). The bound barely moves for it (flat rows,
// N = 256: ~-1.24 against ~-1.17 with whole chains; a Python model) and no thread walks more
// than one batch.
constexpr int kSpineChain = kChainBatch;

// Block-collective, two steps: a lower bound of t* of at least `floor`, from the "spine family": the
// spine (the root's rank-0 chain), and every node one rank off it (rank k >= 1 at depth d below
// the spine's depth d - 1 node) with its first kSpineChain rank-0 descendants: distinct real
// nodes, known without a search, so their N-th best (to a bin's lower edge) bounds t*. On flat
// rows (N = 256) the bound is ~-1.2 against the rectangle's ~-3 and t* ~-0.8, and the levels
// grow ~4x fewer nodes at depth 2 (NOTES.md). First, warp d - 1 finds
// the spine's depth d - 1 score and how many ranks at depth d reach `floor` (rows fall with the
// rank); then the block samples those nodes (rank 0: the spine's own) and their short chains
// into a histogram, a node per thread, so no warp walks more chains than another (a warp per
// depth would: on logits rows all N depth-1 nodes reach the floor, 8 trips).
//
// spine_count: the first step, and its barrier.
KD_DEVICE void spine_count(TreeOnePassSmem& s, float floor, const float* L, int ldl, int D, int N) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  static_assert(kTreeBuildWarps >= kOnePassMaxDepth, "a warp per depth");
  if (warp < D) {  // warp-uniform
    const int d = warp + 1;
    const float spine = add_rank0_rows(0.0f, L, ldl, 0, d - 1);  // the spine node of depth d - 1
    // ranks reaching floor: a prefix; one probe per lane a stride apart, then one per lane
    // inside the stride where the prefix ends
    const float* row = L + static_cast<int64_t>(d - 1) * ldl;
    const int stride = ceil_div(N, kWarpSize);
    const int k1 = lane * stride;
    const unsigned wide = __ballot_sync(kFullMask, k1 < N && __fadd_rn(spine, row[k1]) >= floor);
    int ranks = 0;
    if (wide) {  // warp-uniform
      const int k_lo = (__popc(wide) - 1) * stride;  // reaches; k_lo + stride does not (or is N)
      const int k2 = k_lo + 1 + lane;
      const unsigned fine = __ballot_sync(kFullMask, lane < stride - 1 && k2 < N && __fadd_rn(spine, row[k2]) >= floor);
      ranks = k_lo + 1 + __popc(fine);
    }
    if (lane == 0) {
      s.spine[d - 1] = spine;
      s.spine_ranks[d - 1] = ranks;
    }
  }
  __syncthreads();
}

// spine_sample: the second step, into h (zeroed, bins over [floor, best]), without a barrier;
// the N-th best of h after one is the bound.
KD_DEVICE void spine_sample(const TreeOnePassSmem& s, uint32_t* h, const OnePassBins& bins, float floor, const float* L,
                            int ldl, int D) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  // the nodes: ranks 0.. of each depth d (rank 0: the spine's depth d node), by depth; lane l
  // holds the running count through depth l + 1, and each node finds its depth among them
  const int n_lane = lane < D ? s.spine_ranks[lane] : 0;
  const int incl = warp_inclusive_sum(n_lane);
  const int total = __shfl_sync(kFullMask, incl, kWarpSize - 1);
  for (int j0 = warp * kWarpSize; j0 < total; j0 += kTreeBuildThreads) {  // warp-uniform
    const int j = j0 + lane;
    int at = 0;  // the first lane whose running count passes j: j's depth is at + 1
#pragma unroll
    for (int step = kOnePassMaxDepth + 1; step > 1; step >>= 1) {
      const int probe = __shfl_sync(kFullMask, incl, at + step / 2 - 1);
      if (probe <= j) at += step / 2;
    }
    const int before = __shfl_sync(kFullMask, incl - n_lane, at);
    if (j < total) {
      const int d = at + 1, k = j - before;
      float sc = __fadd_rn(s.spine[d - 1], L[static_cast<int64_t>(d - 1) * ldl + k]);
      atomicAdd(&h[bins.bin(float_to_ordered(sc))], 1u);
      if (k >= 1) {  // its first kSpineChain rank-0 descendants, while they reach floor
        float col[kSpineChain];
#pragma unroll
        for (int r = 0; r < kSpineChain; ++r) col[r] = d + r < D ? L[static_cast<int64_t>(d + r) * ldl] : 0.0f;
        bool alive = true;  // (below floor: the rest of the chain is lower still)
#pragma unroll
        for (int r = 0; r < kSpineChain; ++r) {
          sc = __fadd_rn(sc, col[r]);
          alive = alive && d + r < D && sc >= floor;
          if (alive) atomicAdd(&h[bins.bin(float_to_ordered(sc))], 1u);
        }
      }
    }
  }
}

// Whether a node the tree grows starts a sample of its own (itself and its rank-0 chain; see
// onepass_tree): a rank >= 1 whose parent is off the spine (two ranks >= 1 or more on its path),
// or with the spine family in the histogram (spine_count, spine_sample), the rank-0 descendant of a node one
// rank off the spine just past that family's kSpineChain (its chain goes on from there). The
// spine and the rest of the family are in the histogram already.
KD_DEVICE bool spine_sample_root(uint32_t parent_meta, int k, int d) {
  const uint32_t off = meta_off(parent_meta);
  if (k >= 1) return off != kOffSpineNone;
  return off == kOffSpineOne && d == meta_off_depth(parent_meta) + kSpineChain + 1;
}

// Children of a node scoring sf that reach t (row: the children's depth's), usually few.
KD_DEVICE int children_reaching(float sf, const float* row, int N, float t) {
  return count_leading_small(N, [&](int k) { return __fadd_rn(sf, row[k]) >= t; });
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
// kOnePassMaxDepth. The histograms cum[0], lvl[1], lvl[2] must be zero and published (a barrier
// since). Every thread of the block calls it.
KD_DEVICE bool onepass_tree(const TreeBuildParams& p, TreeOnePassSmem& s, const float* L, int ldl, int D, int N,
                            int b, int64_t tok0, int32_t root_token, int32_t start) {
  TREE_CLK_BEGIN(clk_levels);
  TREE_CLK_COUNT(kTreeClkOnePass);
  constexpr int kClk = kTreeClkOnePassDetail;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  constexpr int threads = kTreeBuildThreads;
  uint32_t v[kOnePassBinsPerLane];  // a lane's bin counts (onepass_nth_bin)
  TREE_CLK_BEGIN(clk_step);
  // two lower bounds of t*: N depth-1 nodes reach the N-th best of them, and the rectangle's
  const float t0 = fmaxf(L[N - 1], rectangle_bound(L, ldl, D, N));
  const OnePassBins bins(t0, L[0]);  // L[0]: no node scores more
#ifndef KD_ONEPASS_NO_SPINE
  // the spine family into the histogram that level 2 reads its t from (cum[0]; level 1 samples
  // nothing then), beside level 1's writes: one barrier for both
  spine_count(s, t0, L, ldl, D, N);
  spine_sample(s, s.cum[0], bins, t0, L, ldl, D);
#endif
  TREE_CLK_END(clk_step, kClk + 9);
  float t = t0;

  // level 1: the N depth-1 nodes at slots 1..N in rank order (without the spine family: those
  // >= t sampled into lvl[1], node 0's chain the root's)
  TREE_CLK_RESTART(clk_step);
  for (int k0 = warp * kWarpSize; k0 < N; k0 += threads) {  // warp-uniform
    const int k = k0 + lane;
    float sc = 0.0f;
    if (k < N) {
      sc = __fadd_rn(0.0f, L[k]);
      s.score[1 + k] = sc;
      s.meta[1 + k] = onepass_meta(0, k, 1) | child_off_bits(0u, k, 1);
    }
#ifdef KD_ONEPASS_NO_SPINE
    if (k < N && sc >= t) sample_chain(s.lvl[1], bins, sc, 1, t, L, ldl, D);
#endif
  }
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
    // read: cum[d % 2] (levels < d - 1) and lvl[(d - 1) % 3]; written: cum[(d + 1) % 2] = their
    // sum, lvl[d % 3] (this level's samples); zeroed: lvl[(d + 1) % 3] (the next level's)
    const uint32_t* c_read = s.cum[d % 2];
    const uint32_t* x_read = s.lvl[(d - 1) % 3];
    uint32_t* x_fill = s.lvl[d % 3];
    for (int i = tid; i < kOnePassBins; i += threads) {
      s.cum[(d + 1) % 2][i] = c_read[i] + x_read[i];
      s.lvl[(d + 1) % 3][i] = 0;
    }
    if (tid == 0) s.grown[(d + 1) % 3] = 0;  // the next level's counter
    const float* row = L + static_cast<int64_t>(d - 1) * ldl;
    const int F = le - lb;
    bool raised = false;
    for (int c0 = 0; c0 < F; c0 += threads) {  // block-uniform trips
      const int i = c0 + lane * kTreeBuildWarps + warp;  // consecutive nodes in different warps
      const bool mine = i < F;
      if (!__any_sync(kFullMask, mine)) continue;  // warp-uniform
      TREE_CLK_RESTART(clk_step);
      if (!raised) {  // warp-uniform; t from every sample so far
        const int bin = onepass_nth_bin(c_read, x_read, N, v);
        if (bin >= 0) t = fmaxf(t, bins.edge(bin));
        raised = true;
      }
      TREE_CLK_END(clk_step, kClk + 2);
      TREE_CLK_RESTART(clk_step);
      const float sf = mine ? s.score[lb + i] : 0.0f;
      const uint32_t mf = mine ? s.meta[lb + i] : 0u;
      const int c = mine ? children_reaching(sf, row, N, t) : 0;
      TREE_CLK_END(clk_step, kClk + 3);
      TREE_CLK_RESTART(clk_step);
      const int incl = warp_inclusive_sum(c);
      const int total = __shfl_sync(kFullMask, incl, kWarpSize - 1);
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
        const uint32_t mq = __shfl_sync(kFullMask, mf, q);
        const int k = at - first_q;
        float sc = 0.0f;
        if (at < total) {
          const int slot = base + at;
          sc = __fadd_rn(sq, row[k]);
          s.score[slot] = sc;
          s.meta[slot] = onepass_meta(lb + c0 + q * kTreeBuildWarps + warp, k, d) | child_off_bits(mq, k, d);
        }
#ifndef KD_ONEPASS_NO_SPINE
        if (at < total && spine_sample_root(mq, k, d)) sample_chain(x_fill, bins, sc, d, t, L, ldl, D);
#else
        if (at < total && k >= 1) sample_chain(x_fill, bins, sc, d, t, L, ldl, D);  // sample roots: rank >= 1
#endif
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

  // The candidates' histogram: every sample so far (in the N-th best's bin and above they are
  // the pool nodes that reach its edge, each sampled once), and where they go in the select
  const uint32_t* h1 = s.cum[(last + 1) % 2];  // levels < last (written by the last level; cum[0] when last = 1)
  const uint32_t* h2 = s.lvl[last % 3];        // the last level's samples
  OnePassBins sel = bins;
  int32_t* place = reinterpret_cast<int32_t*>(s.cum[last % 2]);  // free: read by the last level (or never)
  uint32_t* cursor = s.lvl[(last + 1) % 3];    // zeroed by the last level (or at the start)
  int16_t* by_bin = reinterpret_cast<int16_t*>(s.lvl[(last + 2) % 3]);  // free: read by the last level
  if (lb < le && last < D) {  // block-uniform: the warps grow the rest alone
    TREE_CLK_BEGIN(clk_warps);
    TREE_CLK_BEGIN(clk_wstep);
    constexpr int kWClk = kTreeClkWarpDetail;
    // t for the rest: the N-th best of every sample (at least every warp's t: the samples only
    // grew), the same in every warp; once the warps are done, a fresh histogram over [t, best]
    // counts the pool's nodes that reach it, for the select (one pass of the block over the
    // pool, so the warps' levels add to no histogram: 19.5 against 19.8 us in a graph at flat
    // N = 256 B = 64, NOTES.md)
    const int at_b = onepass_nth_bin(h1, h2, N, v);
    const float tb = at_b >= 0 ? bins.edge(at_b) : t0;
    const OnePassBins bins_b(tb, L[0]);
    uint32_t* hb = s.lvl[(last + 1) % 3];     // zeroed by the last level
    uint32_t* cur_b = s.lvl[(last + 2) % 3];  // the select's cursors: free, zeroed here
    for (int i = tid; i < kOnePassBins; i += threads) cur_b[i] = 0;
    // warp w: frontier nodes lb + w, lb + w + 16, ..., then its own children level by level,
    // each level's in one contiguous run of slots. A node's children count (>= tb, frozen) is
    // found by the lane that writes the node, right after its score, and kept in kids (free
    // until the select), so a level starts from loads and one scan, not from searches.
    int16_t* kids = s.final_idx;
    int fb = lb + warp, stride = kTreeBuildWarps;
    int F = le - lb > warp ? ceil_div(le - lb - warp, stride) : 0;
    if (last + 1 <= D) {
      const float* row = L + static_cast<int64_t>(last) * ldl;
      for (int i = lane; i < F; i += kWarpSize)
        kids[fb + i * stride] = static_cast<int16_t>(children_reaching(s.score[fb + i * stride], row, N, tb));
      __syncwarp();
    }
    TREE_CLK_END(clk_wstep, kWClk);
    for (int d = last + 1; d <= D && F > 0; ++d) {  // warp-uniform
      TREE_CLK_RESTART(clk_wstep);
      const float* row = L + static_cast<int64_t>(d - 1) * ldl;
      const float* next_row = d < D ? row + ldl : nullptr;
      const int c_first = lane < F ? kids[fb + lane * stride] : 0;
      const int incl_first = warp_inclusive_sum(c_first);
      int total = __shfl_sync(kFullMask, incl_first, kWarpSize - 1);
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
        const int incl = i0 == 0 ? incl_first : warp_inclusive_sum(c);
        const int tot = __shfl_sync(kFullMask, incl, kWarpSize - 1);
        for (int at0 = 0; at0 < tot; at0 += kWarpSize) {  // warp-uniform
          const int at = at0 + lane;
          const int q = lane_holding(incl, at);  // the parent's lane
          const int k = at - __shfl_sync(kFullMask, incl - c, q);
          const float sq = __shfl_sync(kFullMask, sf, q);
          const int fq = __shfl_sync(kFullMask, f, q);
          if (at < tot) {
            const float sc = __fadd_rn(sq, row[k]);
            s.score[at_base + at] = sc;
            s.meta[at_base + at] = onepass_meta(fq, k, d);
            kids[at_base + at] = static_cast<int16_t>(next_row ? children_reaching(sc, next_row, N, tb) : 0);
          }
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
    for (int i = 1 + tid; i < le; i += threads) {  // hb: the pool's nodes >= tb, for the select
      const uint32_t key = float_to_ordered(s.score[i]);
      if (key >= float_to_ordered(tb)) atomicAdd(&hb[bins_b.bin(key)], 1u);
    }
    __syncthreads();
    h1 = hb;
    h2 = nullptr;
    sel = bins_b;
    cursor = cur_b;
    by_bin = reinterpret_cast<int16_t*>(s.cum[(last + 1) % 2]);  // the samples are counted in hb now
    TREE_CLK_END(clk_warps, kTreeClkOnePass + 4);
  }

  // The candidates: every sample in the N-th best's bin and above is a pool node >= t* - a bin,
  // and every such pool node was sampled. Warp 0: the bins' places (from the top) and counts.
  TREE_CLK_BEGIN(clk_select);
  TREE_CLK_RESTART(clk_step);
  if (warp == 0) {
    int acc = 0;  // place[b]: candidates in the bins above b (this lane's bins from its top one down)
    const int first = onepass_nth_bin(h1, h2, N, v, &acc);
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
  static_assert(sizeof(s.lvl[0]) >= kOnePassCands * sizeof(int16_t) && sizeof(s.vis) >= kOnePassCands * sizeof(uint32_t),
                "the candidates by bin fit the free space");
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
    const int lo = place[bin], hi = lo + static_cast<int>(h1[bin] + (h2 ? h2[bin] : 0u));
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
