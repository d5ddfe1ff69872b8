// Device code of tree_build (the host API is tree_build.cuh; the plan tree_build_plan.h).
//
// A request within its limits (N <= 256, K >= N, D <= 15, rows staged) first tries the one-pass
// search (tree_build_onepass.cuh), which grows the tree once; when it gives up, or outside its
// limits, the searches below run (the sweep, A, and the bisection, B).
//
// The tree is the first N nodes of the total order (score desc, rank path asc), and every
// set {score >= t} is closed under parents (logp <= 0). One block per request grows such a
// set level by level into a node pool in shared memory: a node's children with score >= t
// are a prefix of its sorted row (one search each, in steps of four); a warp scans its
// nodes' counts, the whole block writes the level's children: two barriers per level.
// What a launch costs is the work between barriers: the longest chain of dependent steps,
// and the instructions issued by all 16 warps (4 per scheduler); so the searches probe several
// positions per step, work is spread evenly, and idle lanes are packed into idle warps.
//
//   A. one sweep (when K >= N): t starts at the N-th best depth-1 score, a lower bound of the
//      N-th best score t* (the best N of any set of nodes are no better than the best N of
//      all). Each level is grown at the current t. With the level raise (opt-in, kLevelRaise)
//      t rises every level: while a level's children are written, a histogram of real nodes
//      >= t is built (the pool, the new children, the first children and grandchildren of
//      each), and the next level is counted at its N-th best (to a bin); when no new child has
//      a child >= t, the empty next level is not grown. When a level would overflow the pool,
//      t is raised at once from a larger sample (the first few children of each node of the
//      level and their first few children). Every node scoring >= t* is then in the pool, stale
//      nodes below t have no children, and the N best of the pool are the tree. When the level
//      still overflows (stale nodes fill the pool), they are compacted away and the level
//      regrown; failing that, a fresh sweep starts from the bound reached (up to kTreeSweeps,
//      while it rises).
//   B. otherwise (K < N, or the pool filled up with no progress: many exact ties, very flat
//      rows): bisection on t over the float's ordered bits, a full grow per probe, until a
//      set of N_eff..2 N_eff nodes is found (N_eff = min(N, number of paths)); when exact
//      ties at the threshold are too many for the pool, t* = the largest t with count >= N_eff,
//      the pool holds the nodes scoring > t*, and the M = N_eff - count_gt tied nodes that
//      come first by rank path are decoded: a node scoring t* can only have tied children
//      (ranks < z_m, the same for all of them at depth m), so tied nodes hang off the strict
//      tree as complete subtrees of known size, in rank-path order strict node by strict
//      node in post-order.
//   C. order: the candidates (score >= the final t; narrowed to ~N by a histogram when more
//      than max(2N, 512), or always after A without the level raise)
//      sorted by (score desc, preorder = rank-path order): up to 512, a rank sort (warp-sorted
//      runs, then each key's rank by searches in every run), beyond, a register/shuffle
//      bitonic network; the first ones (then the tied nodes, in preorder) are the tree.
//      Preorder comes from the level layout without a pass per level: see node_preorder.
//      Rows written one thread per row; the bit-packed visibility rows built in shared
//      memory, then copied out contiguously.
// Scores: __fadd_rn in depth order, bit-exact with python_engine/ddtree.
#pragma once

#include "block_scan.cuh"
#include "block_sort.cuh"
#include "device_compat.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"
#include "tree_build_common.cuh"
#include "tree_build_onepass.cuh"

namespace kdtree::kern {

constexpr int kTreeWindow = 2 * kTreeMaxNodes;      // a probe set this small ends the bisection
constexpr int kTreePoolCap = kTreeWindow + 1;       // node slots: the root and the window
constexpr int kTreeSortCap = kTreeWindow;           // power of two >= any candidate count
constexpr int kTreeStrictCap = kTreeMaxNodes + 1;   // strict-set slots in the tie path (< N + 1)
constexpr int kTreeTieSlot = 1 << 14;               // tie_parent codes >= this name a tied node
constexpr int kTreeHistBins = 1024;                 // threshold histogram of the sweep (A)
constexpr int kTreeHistBits = 10;
static_assert(kTreeHistBins == 1 << kTreeHistBits, "HistBins takes the bin from the top bits");
constexpr int kTreeHistSets = 3;                    // the raise's histogram, then the level raise's two (A)
constexpr int kTreeSweeps = 8;                      // sweeps (each from the best bound so far) before B
constexpr int kTreeSampleChildren = 6;              // sampled children per parent when raising t ...
constexpr int kTreeSampleGrandchildren = 5;         // ... and grandchildren per sampled child (a thread's loop)
constexpr int kTreeLookChildren = 2;                // the level raise's sample below each new node: children ...
constexpr int kTreeLookGrandchildren = 2;           // ... and grandchildren of each (emulator, 64 requests: as
                                                    //   few rounds as 4/3, 6/5 or 8/8; 2/1 and 1/0 take more)
constexpr int kTreeTailChildren = 2 * kWarpSize;    // warp_tail: a level's children it writes (2 trips)
constexpr int kTreeRootChildren = 4;                // the same below each depth-1 node, before the first grow
constexpr int kTreeRootGrandchildren = 3;           //   (once: the pool at the end of flat N=256 sweeps halves,
                                                    //   ~1150 -> ~600 nodes; 2/2: ~1150, 6/5: ~500)
constexpr int kTreeSlotBits = 16;                   // sort key: ~score << 32 | preorder << 16 | slot
static_assert((kTreeSortCap & (kTreeSortCap - 1)) == 0, "bitonic sort needs a power of two");
static_assert(kTreePoolCap < 32768 && kTreeTieSlot > kTreeStrictCap, "slots must fit int16");
static_assert(kTreePoolCap < (1 << kTreeSlotBits), "slot and preorder share the key's low 32 bits");
static_assert(kTreeHistSets * kTreeHistBins * sizeof(uint32_t) <= kTreeSortCap * sizeof(uint64_t),
              "the histograms share the sort keys' space");
static_assert(kTreeBuildWarps <= kWarpSize && (kTreeBuildWarps & (kTreeBuildWarps - 1)) == 0,
              "grow_level scans the per-warp totals in one warp, searches them by halving");
constexpr int kTreeStageUnroll = 8;  // logp loads in flight per thread while staging the rows

struct TreeBuildSmem {
  // phase-local scratch, one phase at a time
  union {
    uint64_t keys[kTreeSortCap];     // sort keys (C)
    uint32_t hist[kTreeHistSets * kTreeHistBins];  // threshold histograms (A): the raise's, the level raise's two
    struct {
      int32_t base[kTreeStrictCap];  // tied-node counts by post-order index, then their scan
      int32_t slot_by_post[kTreeStrictCap];
    } tie;
  } u;
  // the node pool: slot 0 is the root, then depth 1, depth 2, ... each level contiguous and
  // in rank-path order (children grouped by parent, ranks ascending)
  float score[kTreePoolCap];
  int32_t nkids[kTreePoolCap];     // children that passed the level's test (growing)
  int32_t first[kTreePoolCap];     // offset of the first child within the next level
  int32_t size[kTreePoolCap];      // subtree size within the pool (tie path)
  int32_t tie_parent[kTreeMaxNodes];     // strict slot, or kTreeTieSlot + tied index
  int32_t level_begin[kTreeMaxDepth + 3];  // first slot of each depth; [d+1] ends depth d
  int32_t tie_subtree[kTreeMaxDepth + 2];  // T(m): nodes in a tied subtree rooted at depth m
  int32_t warp_total[kTreeBuildWarps];     // a level's children per warp
  int32_t counter;                         // candidates (C)
  BlockScratch<int32_t> scratch;
  int32_t found;                           // histogram bin of the N-th best (A)
  float level_t;                           // the level raise's threshold, from warp 0 (A)
  int32_t level_more[2];                   // the level raise: some new child has a child >= t (A)
  int32_t tail[4];                         // warp_tail's result for the other warps: lb, le, d, done (A)
  int16_t parent[kTreePoolCap];  // parent slot
  int16_t rank[kTreePoolCap];    // rank in its depth's sorted row
  int16_t depth[kTreePoolCap];
  int16_t pre[kTreePoolCap];     // preorder index within the pool (tie path)
  int16_t final_idx[kTreePoolCap];  // node index of a selected slot
  int16_t out_parent[kTreeMaxNodes + 1];  // parent node index of every emitted node
  int16_t tie_depth[kTreeMaxNodes];
  int16_t tie_rank[kTreeMaxNodes];
};

// Dynamic shared memory of one request block, and whether the logp rows are staged in it
// too (they are read from global memory otherwise).
constexpr size_t kTreeBuildBaseSmem = (sizeof(TreeBuildSmem) + 15) / 16 * 16;
static_assert(sizeof(TreeOnePassSmem) <= sizeof(TreeBuildSmem), "the one-pass search uses the sweep's space");
inline size_t tree_build_base_smem() { return kTreeBuildBaseSmem; }
inline size_t tree_build_stage_bytes(int depth, int topk, int max_budget) {
  const int k = topk < max_budget ? topk : max_budget;
  return sizeof(float) * static_cast<size_t>(depth) * static_cast<size_t>(k > 0 ? k : 0);
}
inline size_t tree_build_smem_size(int depth, int topk, int max_budget, size_t smem_limit) {
  const size_t staged = tree_build_base_smem() + tree_build_stage_bytes(depth, topk, max_budget);
  return staged <= smem_limit ? staged : tree_build_base_smem();
}

// The root alone in the pool.
KD_DEVICE void pool_reset(TreeBuildSmem& s) {
  if (threadIdx.x == 0) {
    s.score[0] = 0.0f;
    s.parent[0] = -1;
    s.rank[0] = -1;
    s.depth[0] = 0;
    s.level_begin[0] = 0;
    s.level_begin[1] = 1;
  }
  __syncthreads();
}

// The threshold histograms' bins: ordered bits of the scores from t up to `best`.
using HistBins = ThresholdBins<kTreeHistBits>;

// Warp-collective (all 32 lanes): the first bin of h from the top where the count from the
// top reaches n, or 0 when none does.
constexpr int kHistPerLane = kTreeHistBins / kWarpSize;  // a lane's run of bins in hist_nth_bin
constexpr int kHistQuads = kHistPerLane / 4;             // ... read as this many uint4
static_assert(kHistQuads == 8, "the lanes of a quarter warp take distinct quads (bank groups): 8 of them");
// The q-th uint4 a lane reads of its run (rotated by the lane: the 8 lanes of a quarter warp,
// whose runs start 128 bytes apart, take distinct bank groups instead of all the same one).
KD_DEVICE int hist_quad(int q, int lane) { return (q + lane) & (kHistQuads - 1); }
KD_DEVICE int hist_nth_bin(const uint32_t* h, int n) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  constexpr int kPer = kHistPerLane;  // lane j: bins 1023 - 32 j down to 992 - 32 j
  const uint4* mine = reinterpret_cast<const uint4*>(&h[(kWarpSize - 1 - lane) * kPer]);
  int sum = 0;
#pragma unroll
  for (int q = 0; q < kHistQuads; ++q) {
    const uint4 v = mine[hist_quad(q, lane)];
    sum += static_cast<int>(v.x + v.y + v.z + v.w);
  }
  const int incl = warp_inclusive_sum(sum);
  const unsigned reach = __ballot_sync(kFullMask, incl >= n);
  if (!reach) return 0;  // warp-uniform
  const int w = __ffs(reach) - 1;  // the lane whose bins hold the n-th from the top
  const int before = __shfl_sync(kFullMask, incl - sum, w);
  const int b = kTreeHistBins - 1 - (w * kPer + lane);  // lane q takes w's q-th bin from the top
  const int in = warp_inclusive_sum(static_cast<int>(h[b]));
  return kTreeHistBins - 1 - (w * kPer + __ffs(__ballot_sync(kFullMask, before + in >= n)) - 1);
}

// The level raise (sweep only): while a level's children are written, the histogram of a
// sample of real nodes is built alongside (every pool node >= t, the new children, and the
// first few children and grandchildren of each new child, all >= t: distinct real nodes, so
// their n-th best is a lower bound of t*); the next grow_level starts from it. No barrier of
// its own: the histogram is read before the next level's first barrier (every counting warp
// reads it; warp 0 hands the result to the others) and zeroed after it, two histograms taking
// turns. A loose first bound (the N-th best depth-1 score) thus tightens every level instead
// of only when a level overflows the pool (emulator, 64 requests, grows + raises per request
// mean/max: flat N=256 12.1/15 -> 6.2/8, flat N=16 8.1/12 -> 3.3/5, peaky N=256 15.5/23 ->
// 8.9/15, logits N=256 3.9/7 -> 2.7/4, with the empty last level not grown).
// Opt-in (KD_TREE_LEVEL_RAISE=1): fewer rounds, but the scans' shared-memory traffic and the
// sample's atomics cost more than the rounds save where it matters: on the H200 it is faster on
// flat rows and slower on the drafter's logits rows (docs/kernels/tree_build.md). Its scans are
// conflict-free (hist_quad: uint4 loads 128 bytes apart had put 8-way bank conflicts in each
// quarter warp), warp 0 alone handles the skipped level, and the root's sample keeps levels 1-2
// small.
struct LevelRaise {
  int n = 0;                       // the budget
  float best = 0.0f;               // the best score: the bins' top
  const float* row1 = nullptr;     // the sample's rows below the new children (null: none)
  const float* row2 = nullptr;
  int k1 = 0, k2 = 0;              // children / grandchildren sampled per node (<= K)
  int next = 0;                    // the histogram the next grow_level reads (0 or 1)
  float t_fill = 0.0f;             // the threshold it was filled at (its bins' bottom)
  bool unread = false;             // skip the read once: the histograms are being zeroed (after a
                                   //   compaction, which stages in their space) until the next barrier
  KD_DEVICE uint32_t* hist(TreeBuildSmem& s, int which) const { return s.u.hist + (1 + which) * kTreeHistBins; }
};

// A new child scoring sc (>= t) into the level raise's histogram, with its first children and
// their first children that reach t (rows descending: each loop stops at the first miss);
// *more = 1 when it has a child >= t (then the next level is not empty).
KD_DEVICE void level_sample(uint32_t* h, int32_t* more, const HistBins& hb, const LevelRaise& lr, float sc, float t) {
  atomicAdd(&h[hb.bin(float_to_ordered(sc))], 1u);
  for (int k = 0; k < lr.k1; ++k) {
    const float c = __fadd_rn(sc, lr.row1[k]);
    if (!(c >= t)) break;
    if (k == 0 && more) *more = 1;  // (every writer stores the same value)
    atomicAdd(&h[hb.bin(float_to_ordered(c))], 1u);
    for (int j = 0; j < lr.k2; ++j) {
      const float g = __fadd_rn(c, lr.row2[j]);
      if (!(g >= t)) break;
      atomicAdd(&h[hb.bin(float_to_ordered(g))], 1u);
    }
  }
}

// Grow level [lb, le) (depth d, children from `row`) into slots [le, le + total): the
// children with score >= t (> t when strict). Returns total, or -1 with no child written
// (the nodes' counts are left in nkids) when le + total would pass `slot_limit`. bounded:
// nkids holds the counts at a lower t (an upper bound). Each warp counts a contiguous run of
// the level's nodes, so its children are contiguous too; then the whole block writes the
// children, spread evenly over the threads (each finds its parent's warp from the warps'
// totals, then its parent by a search in that warp's run), since a few parents often have
// most of the children: two barriers per level. Every thread of the block calls it.
// lr (the sweep's level raise, see LevelRaise): t may rise first; *t_out: the t the level was
// counted at (the caller's t when lr is null).
KD_DEVICE int grow_level(TreeBuildSmem& s, const float* row, int K, int lb, int le, int d, float t, bool strict,
                         int slot_limit, bool bounded = false, LevelRaise* lr = nullptr, float* t_out = nullptr) {
  TREE_CLK_BEGIN(clk_grow);
  TREE_CLK_COUNT(11);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  constexpr int warps = kTreeBuildWarps;
  // whole chunks of 32 per warp: a warp's lanes all busy, the warps past the level idle at the
  // barrier (their instructions would only take issue slots from the busy ones)
  const int per_warp = round_up(ceil_div(le - lb, warps), kWarpSize);
  const int nb = min(le, lb + warp * per_warp), ne = min(le, nb + per_warp);
  // size[] is scratch while growing (the tie path fills it after the search): each node's
  // first child's offset among its warp's children
  if (lr && !lr->unread && nb < ne) {  // warp-uniform: the warps that count take t from the last level's sample
    const HistBins hb(lr->t_fill, lr->best);
    const int bin = hist_nth_bin(lr->hist(s, lr->next), lr->n);
    t = fmaxf(t, hb.edge(bin));
  }
  if (lr && warp == 0 && lane == 0) s.level_t = t;
  int mine = 0;  // this warp's children
  for (int r = nb; r < ne; r += kWarpSize) {  // warp-uniform
    const int i = r + lane;
    const int c = i < ne ? count_passing(s.score[i], row, bounded ? s.nkids[i] : K, t, strict) : 0;
    const int incl = warp_inclusive_sum(c);
    if (i < ne) {
      s.size[i] = mine + incl - c;
      s.nkids[i] = c;
    }
    mine += __shfl_sync(kFullMask, incl, kWarpSize - 1);
  }
  if (lane == 0) s.warp_total[warp] = mine;
  __syncthreads();
  // lane l < warps of every warp: the children of warps 0..l (a warp scan of the totals)
  const int warp_kids = lane < warps ? s.warp_total[lane] : 0;
  const int through = warp_inclusive_sum(warp_kids);
  const int total = __shfl_sync(kFullMask, through, warps - 1);
  const int before = __shfl_sync(kFullMask, through, max(warp - 1, 0));
  const int base = warp > 0 ? before : 0;  // this warp's first child in the next level
  uint32_t* fill = nullptr;  // the level raise's histogram for the next level (null: none)
  int32_t* more = nullptr;   // ... and its flag
  LevelRaise look;           // the sample's rows and sizes, in registers for the write loop
  HistBins fill_bins(0.0f, 0.0f);
  if (lr) {
    lr->unread = false;
    t = s.level_t;  // the idle warps' t too (warp 0 always counts: the level is not empty)
    uint32_t* used = lr->hist(s, lr->next);  // read by every counting warp before the barrier
    for (int b = static_cast<int>(threadIdx.x); b < kTreeHistBins; b += kTreeBuildThreads) used[b] = 0;
    if (threadIdx.x == 0) s.level_more[lr->next] = 0;  // read by the caller after the last grow's barrier
    if (le + total <= slot_limit && total > 0) {
      fill = lr->hist(s, 1 - lr->next);
      more = &s.level_more[1 - lr->next];
      lr->next = 1 - lr->next;
      lr->t_fill = t;
      look = *lr;
      fill_bins = HistBins(t, lr->best);
    }
  }
  if (t_out) *t_out = t;
  KD_EVENT("grow", d, le + total > slot_limit ? -total : total);
  if (le + total > slot_limit) {
    __syncthreads();  // warp_total is rewritten by the next call
    TREE_CLK_END(clk_grow, 9);
    return -1;
  }
  if (total == 0) {  // block-uniform; the caller closes the pool at this level (first, nkids)
    TREE_CLK_END(clk_grow, 9);
    return 0;
  }
  // first[] (offsets within the next level) for the later phases; this pass reads only size[]
  for (int i = nb + lane; i < ne; i += kWarpSize) s.first[i] = s.size[i] + base;
  if (threadIdx.x == 0) s.level_begin[d + 2] = le + total;
  for (int at0 = warp * kWarpSize; at0 < total; at0 += kTreeBuildThreads) {  // warp-uniform trips
    const int at = at0 + lane;  // position in the next level
    // the warp whose children hold `at`: the number of warps whose children all come before
    // it (the scan's values, from their lanes, by halving steps)
    int w = 0;
#pragma unroll
    for (int step = warps / 2; step >= 1; step >>= 1)
      if (__shfl_sync(kFullMask, through, w + step - 1) <= at) w += step;
    const int before_w = __shfl_sync(kFullMask, through, max(w - 1, 0));
    const int base_w = w > 0 ? before_w : 0;
    if (at >= total) continue;
    // the parent: the last node of that warp's run whose first child is at or before `at`
    const int nb_w = lb + w * per_warp, ne_w = min(le, nb_w + per_warp), local = at - base_w;
    const int lo = nb_w + count_leading(ne_w - nb_w - 1, [&](int x) { return s.size[nb_w + 1 + x] <= local; });
    const int k = local - s.size[lo];
    const int slot = le + at;
    const float sc = __fadd_rn(s.score[lo], row[k]);
    s.score[slot] = sc;
    s.parent[slot] = static_cast<int16_t>(lo);
    s.rank[slot] = static_cast<int16_t>(k);
    s.depth[slot] = static_cast<int16_t>(d + 1);
    if (fill) level_sample(fill, more, fill_bins, look, sc, t);
  }
  if (fill) {  // the pool's nodes >= t (stale ones fall below it)
    for (int i = 1 + static_cast<int>(threadIdx.x); i < le; i += kTreeBuildThreads) {
      const float v = s.score[i];
      if (v >= t) atomicAdd(&fill[fill_bins.bin(float_to_ordered(v))], 1u);
    }
  }
  __syncthreads();
  TREE_CLK_END(clk_grow, 9);
  return total;
}

// The last grown level [lb, le) has no children in the pool; deeper levels are empty.
KD_DEVICE void pool_close(TreeBuildSmem& s, int lb, int le, int d) {
  for (int i = lb + static_cast<int>(threadIdx.x); i < le; i += kTreeBuildThreads) {
    s.nkids[i] = 0;
    s.first[i] = 0;
  }
  if (threadIdx.x == 0)
    for (int e = d + 1; e <= kTreeMaxDepth + 2; ++e) s.level_begin[e] = le;
  __syncthreads();
}

// Grow {nodes with score > t (strict) or >= t} into the pool. Stops as soon as `limit`
// nodes are reached and returns that count (>= limit); otherwise returns the full count
// with the levels in place. Every thread of the block calls it.
KD_DEVICE int grow_tree(TreeBuildSmem& s, const float* L, int ldl, int D, int K, float t, bool strict, int limit) {
  pool_reset(s);
  int lb = 0, le = 1, d = 0;
  for (; d < D; ++d) {
    const int total = grow_level(s, L + static_cast<int64_t>(d) * ldl, K, lb, le, d, t, strict, limit);
    if (total < 0) return limit;
    if (total == 0) break;
    lb = le;
    le += total;
  }
  pool_close(s, lb, le, d);
  return le - 1;
}

// Preorder (rank-path order) index of pool slot i (the root 0), and its subtree size, from
// the level layout, with no pass per level: the nodes before i in rank-path order are its
// ancestors, the nodes before each ancestor in its own level (walking up), and in every deeper
// level the descendants of the level-d nodes before i, whose count R_e walks down the levels:
// R_{d+1} = first[i], R_{e+1} = first[node R_e of level e] (or all of level e+1 past its end).
// Walking i + 1 alongside gives the end of i's descendants: the subtree size.
KD_DEVICE void node_preorder(const TreeBuildSmem& s, int i, int* pre_out, int* size_out) {
  const int d = s.depth[i];
  int pre = 0;  // the root, then per ancestor (i included): itself and the nodes before it in its level
  int size = 1;
  int r = s.first[i];  // R_{d+1}
  int r_end = i + 1 < s.level_begin[d + 1] ? s.first[i + 1] : s.level_begin[d + 2] - s.level_begin[d + 1];
  // the walk up (a: the current ancestor) and the walk down the levels (e) are independent
  // chains of loads: one loop steps both, so their latencies overlap
  int a = i, e = d + 1;
  bool down = true;
  while (a != 0 || down) {
    if (a != 0) {
      pre += 1 + a - s.level_begin[s.depth[a]];
      a = s.parent[a];
    }
    if (down) {
      const int begin = s.level_begin[e], width = s.level_begin[e + 1] - begin;
      if (e > kTreeMaxDepth || width == 0) {
        down = false;
      } else {
        pre += r;
        size += r_end - r;
        const int next_width = s.level_begin[e + 2] - s.level_begin[e + 1];
        r = r < width ? s.first[begin + r] : next_width;
        r_end = r_end < width ? s.first[begin + r_end] : next_width;
        ++e;
      }
    }
  }
  *pre_out = pre;
  if (size_out) *size_out = size;
}

// Raise t to a better lower bound of t*: the n-th best of the pool's nodes [1, end) scoring
// >= t, together with (when sample > 0) the first `sample` passing children of each node of
// level [lb, end) (their counts at t in nkids, from a grow_level at t) and, when sample2 > 0,
// the first sample2 (<= kTreeSampleGrandchildren) children of each of those (row2: the next
// depth's row; those scoring >= t), to a histogram bin of their ordered bits (rounded down to
// the bin's edge). Any set of real nodes gives a valid bound; more of them, a higher one.
// Returns t itself when the bins cannot tell.
KD_DEVICE float raise_threshold(TreeBuildSmem& s, int end, float t, float best, int n, const float* row = nullptr,
                                int lb = 0, int sample = 0, const float* row2 = nullptr, int sample2 = 0) {
  TREE_CLK_BEGIN(clk_raise);
  TREE_CLK_COUNT(12);
  const int tid = static_cast<int>(threadIdx.x), threads = kTreeBuildThreads;
  const int lane = tid % kWarpSize;
  const HistBins hb(t, best);
  const uint32_t lo = hb.lo;
  auto bin_of = [&](uint32_t key) { return hb.bin(key); };
  // the histogram is all zero here (hist_clear at the start, then warp 0 after each use)
  for (int i = 1 + tid; i < end; i += threads) {
    const uint32_t key = float_to_ordered(s.score[i]);
    if (key >= lo) atomicAdd(&s.u.hist[bin_of(key)], 1u);
  }
  // the grandchildren's logp, the same for every child: in registers (the compiler cannot
  // hoist the loads past the histogram's atomics)
  float grand[kTreeSampleGrandchildren];
#pragma unroll
  for (int j = 0; j < kTreeSampleGrandchildren; ++j) grand[j] = j < sample2 ? row2[j] : 0.0f;
  // one (node, child rank) pair per thread and trip, not one node: a thread's chain of samples
  // is a child and its grandchildren, not up to `sample` of each (the level is often narrower
  // than the block)
  const int pairs = sample > 0 ? (end - lb) * sample : 0;
  for (int q = tid; q < pairs; q += threads) {
    const int node = q / sample, k = q - node * sample, i = lb + node;
    if (k >= s.nkids[i]) continue;  // (k < min(sample, nkids))
    const float cs = __fadd_rn(s.score[i], row[k]);
    atomicAdd(&s.u.hist[bin_of(float_to_ordered(cs))], 1u);
#pragma unroll
    for (int j = 0; j < kTreeSampleGrandchildren; ++j) {
      const uint32_t key = float_to_ordered(__fadd_rn(cs, grand[j]));
      if (j < sample2 && key >= lo) atomicAdd(&s.u.hist[bin_of(key)], 1u);
    }
  }
  __syncthreads();
  if (tid < kWarpSize) {  // the first bin from the top where the count reaches n (bin 0 if none)
    const int bin = hist_nth_bin(s.u.hist, n);
    __syncwarp();
    uint4* mine = reinterpret_cast<uint4*>(&s.u.hist[lane * kHistPerLane]);
#pragma unroll
    for (int q = 0; q < kHistQuads; ++q) mine[hist_quad(q, lane)] = make_uint4(0u, 0u, 0u, 0u);  // zero for the next use
    if (lane == 0) s.found = bin;
  }
  __syncthreads();
  // found is rewritten by the next raise only after its first barrier: every thread has read it
  const int bin = s.found;
  KD_EVENT("raise", end, bin);
  TREE_CLK_END(clk_raise, 10);
  return hb.edge(bin);
}

// Zero the threshold histograms (before a sweep; every use leaves them zero). The
// caller's next barrier publishes it.
KD_DEVICE void hist_clear(TreeBuildSmem& s) {
  for (int b = static_cast<int>(threadIdx.x); b < kTreeHistSets * kTreeHistBins; b += kTreeBuildThreads) s.u.hist[b] = 0;
}

// The pool is full of stale nodes: drop every node scoring < t (their children were never
// grown: the set {score >= t} is closed under parents), keeping the layout (levels in
// rank-path order, first[] of the levels before d; level d = the last grown, about to be
// regrown). Returns false (nothing changed) when no node is stale. *lb, *le: level d's new
// bounds. Every thread of the block calls it; ends with a barrier. Uses size[] (the new
// indices), pre[] and u (staging; the histogram is zeroed again after) as scratch.
constexpr int kPackRankBits = 10, kPackFirstBits = 12;  // rank < kTreeMaxNodes, first <= kTreeWindow
static_assert((1 << kPackRankBits) >= kTreeMaxNodes && (1 << kPackFirstBits) > kTreeWindow &&
                  kPackRankBits + kPackFirstBits + 6 <= 32 && kTreeMaxDepth < 64,
              "compact_pool packs rank, first and depth into 32 bits");
KD_DEVICE bool compact_pool(TreeBuildSmem& s, float t, int d, int* lb, int* le) {
  TREE_CLK_BEGIN(clk_compact);
  const int tid = static_cast<int>(threadIdx.x), threads = kTreeBuildThreads;
  const int end = *le, n = end + 1;  // newidx[end] = the count kept
  // keep flags, laid out as block_exclusive_scan reads them (thread t: items 2t, 2t + 1 of
  // each round), so no barrier is needed before it
  for (int base = 0; base < n; base += 2 * threads)
    for (int q = 0; q < 2; ++q) {
      const int i = base + 2 * tid + q;
      if (i < n) s.size[i] = i == 0 || (i < end && s.score[i] >= t) ? 1 : 0;
    }
  const int kept = block_exclusive_scan(s.size, s.size, n, s.scratch);  // size[i]: i's new slot
  KD_EVENT("compact", end, kept);
  if (kept == end) return false;  // block-uniform
  // stage every kept node at its new slot: score, rank, first (new), depth in u.keys, parent in pre
  for (int i = tid; i < end; i += threads) {
    if (!(i == 0 || s.score[i] >= t)) continue;
    const int e = s.depth[i];
    const int first = e < d ? s.size[s.level_begin[e + 1] + s.first[i]] - s.size[s.level_begin[e + 1]] : 0;
    const uint32_t packed = static_cast<uint32_t>(s.rank[i] < 0 ? 0 : s.rank[i]) |
                            static_cast<uint32_t>(first) << kPackRankBits |
                            static_cast<uint32_t>(e) << (kPackRankBits + kPackFirstBits);
    const int ni = s.size[i];
    s.u.keys[ni] = static_cast<uint64_t>(__float_as_uint(s.score[i])) << 32 | packed;
    s.pre[ni] = static_cast<int16_t>(i == 0 ? -1 : s.size[s.parent[i]]);
  }
  int new_begin = 0;  // thread e <= d + 1: the new start of level e
  if (tid <= d + 1) new_begin = s.size[s.level_begin[tid]];
  __syncthreads();
  constexpr uint32_t kRankMask = (1u << kPackRankBits) - 1, kFirstMask = (1u << kPackFirstBits) - 1;
  for (int j = tid; j < kept; j += threads) {
    const uint64_t v = s.u.keys[j];
    const uint32_t packed = static_cast<uint32_t>(v);
    s.score[j] = __uint_as_float(static_cast<uint32_t>(v >> 32));
    s.rank[j] = static_cast<int16_t>(j == 0 ? -1 : static_cast<int>(packed & kRankMask));
    s.first[j] = static_cast<int>(packed >> kPackRankBits & kFirstMask);
    s.depth[j] = static_cast<int16_t>(packed >> (kPackRankBits + kPackFirstBits));
    s.parent[j] = s.pre[j];
  }
  if (tid <= d + 1) s.level_begin[tid] = new_begin;
  __syncthreads();
  hist_clear(s);  // u held the staging; published by the caller's next barrier (the regrow's first)
  *lb = s.level_begin[d];
  *le = s.level_begin[d + 1];
  TREE_CLK_END(clk_compact, 13);
  return true;
}

// The sweep's last levels: while a level has at most a warp's nodes and at
// most kTreeTailChildren children, warp 0 grows it alone: the count, a warp scan, the children
// written by its lanes, __syncwarp between levels; no block barrier (a level this small kept
// the other 15 warps waiting at two barriers per level). Stops when the tree is complete (the
// pool closed, as pool_close leaves it: returns true) or at a level it leaves to the block
// (wider, or more children; that level is counted again). Warp 0 only; *lb, *le, *d: the level
// reached. With the level raise, t stays at the last sample's bound here (the levels are
// small: the candidates stay ~N, emulator) and the histograms are left as they were (a later
// block grow reads a sample of real nodes >= t, still a valid bound).
KD_DEVICE bool warp_tail(TreeBuildSmem& s, const float* L, int ldl, int D, int K, float t, int* lb_io, int* le_io,
                         int* d_io) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  int lb = *lb_io, le = *le_io, d = *d_io;
  bool done = false;
  while (true) {  // warp-uniform
    if (d >= D) {  // the deepest level (of any width): no children
      done = true;
      break;
    }
    if (le - lb > kWarpSize) break;  // the block's
    const float* row = L + static_cast<int64_t>(d) * ldl;
    const int i = lb + lane;
    const int c = i < le ? count_passing(s.score[i], row, K, t, false) : 0;
    const int incl = warp_inclusive_sum(c);
    const int total = __shfl_sync(kFullMask, incl, kWarpSize - 1);
    KD_EVENT("tail", d, total);
    if (total > kTreeTailChildren || le + total > kTreePoolCap) break;  // the block's
    if (i < le) {
      s.nkids[i] = c;
      s.first[i] = incl - c;  // within the next level
    }
    if (total == 0) {
      done = true;
      break;
    }
    if (lane == 0) s.level_begin[d + 2] = le + total;
    for (int at0 = 0; at0 < total; at0 += kWarpSize) {  // warp-uniform trips
      const int at = at0 + lane;  // position in the next level
      // the parent's lane: lanes before it have all their children before `at`
      const int p = lane_holding(incl, at);
      const int first_p = __shfl_sync(kFullMask, incl - c, p);
      if (at < total) {
        const int par = lb + p, k = at - first_p, slot = le + at;
        s.score[slot] = __fadd_rn(s.score[par], row[k]);
        s.parent[slot] = static_cast<int16_t>(par);
        s.rank[slot] = static_cast<int16_t>(k);
        s.depth[slot] = static_cast<int16_t>(d + 1);
      }
    }
    __syncwarp();  // the next level reads the children's scores
    lb = le;
    le += total;
    ++d;
  }
  if (done) {  // pool_close's work: the last level has no children, deeper levels are empty
    for (int i = lb + lane; i < le; i += kWarpSize) {
      s.nkids[i] = 0;
      s.first[i] = 0;
    }
    for (int e = d + 1 + lane; e <= kTreeMaxDepth + 2; e += kWarpSize) s.level_begin[e] = le;
  }
  *lb_io = lb;
  *le_io = le;
  *d_io = d;
  return done;
}

// A. One sweep from the lower bound t (K >= n). Returns the final threshold (every node >= it
// is in the pool, and at least n are), or NaN when the pool could not make room; *reached is
// then the best lower bound found, from which a fresh sweep (without the pool's stale nodes)
// may succeed.
// level_raise: with the level raise; root_sample: the histograms are zero and published (the
// first sweep): the root's children are sampled before the first grow, so that level 1 is
// counted at a raised t too (not N nodes at the first bound: a smaller pool every level after).
KD_DEVICE float sweep_search(TreeBuildSmem& s, const float* L, int ldl, int D, int K, int n, float t, float* reached,
                             bool level_raise, bool root_sample) {
  const float best = L[0];
  *reached = t;
  LevelRaise lr_state;
  lr_state.n = n;
  lr_state.best = best;
  lr_state.t_fill = t;
  LevelRaise* lr = level_raise ? &lr_state : nullptr;
  if (lr && root_sample) {  // the depth-1 nodes >= t, their first children and grandchildren
    lr_state.row1 = D > 1 ? L + ldl : nullptr;
    lr_state.k1 = D > 1 ? min(kTreeRootChildren, K) : 0;
    lr_state.row2 = D > 2 ? L + 2 * ldl : nullptr;
    lr_state.k2 = D > 2 ? min(kTreeRootGrandchildren, K) : 0;
    const HistBins hb(t, best);
    for (int k = static_cast<int>(threadIdx.x); k < K; k += kTreeBuildThreads) {
      const float v = __fadd_rn(0.0f, L[k]);
      if (!(v >= t)) break;  // the row descends
      level_sample(lr_state.hist(s, lr_state.next), nullptr, hb, lr_state, v, t);
    }
  }
  if (threadIdx.x == 0) s.level_more[0] = s.level_more[1] = 0;  // published by pool_reset's barrier
  pool_reset(s);  // (publishes the root's sample too)
  bool skipped = false;  // the last level's grow was skipped (its t is in level_t)
  bool closed = false;   // warp_tail completed the tree
  int lb = 0, le = 1, d = 0;
  int prev_width = 0;    // the level before [lb, le) (0: none, the root's)
  for (; d < D; ++d) {
    // block-uniform: a small level no wider than the one before (the tree narrowing: few
    // children; a widening level, e.g. the root's children at the first bound, mostly has
    // more than warp_tail takes, and its count would be repeated)
    if (le - lb <= kWarpSize && le - lb <= prev_width) {
      if (threadIdx.x < kWarpSize) {
        int tl = lb, te = le, td = d;
        const bool done = warp_tail(s, L, ldl, D, K, t, &tl, &te, &td);
        if (threadIdx.x == 0) {
          s.tail[0] = tl;
          s.tail[1] = te;
          s.tail[2] = td;
          s.tail[3] = done ? 1 : 0;
        }
      }
      __syncthreads();
      lb = s.tail[0];
      le = s.tail[1];
      d = s.tail[2];
      if (s.tail[3]) {
        closed = true;
        break;
      }
      // (tail is rewritten only after the next level's first barrier: every thread has read it)
    }
    const float* row = L + static_cast<int64_t>(d) * ldl;
    lr_state.row1 = d + 1 < D ? row + ldl : nullptr;
    lr_state.k1 = d + 1 < D ? min(kTreeLookChildren, K) : 0;
    lr_state.row2 = d + 2 < D ? row + 2 * ldl : nullptr;
    lr_state.k2 = d + 2 < D ? min(kTreeLookGrandchildren, K) : 0;
    int total = grow_level(s, row, K, lb, le, d, t, false, kTreePoolCap, false, lr, &t);
    *reached = t;
    if (total < 0) {
      // the level overflows: raise t with a sample of the nodes below it, the first few
      // passing children of each parent and the first few children of each of those (real
      // nodes one level further down: their N-th best is a tighter bound than children alone
      // give, so fewer later levels overflow; emulator, 64 flat requests at N=256: grows +
      // raises mean/max 12.3/16 -> 11.0/14). Not limited to the pool's free slots: samples
      // are only counted. If the level still overflows, the pool is full of nodes that fell
      // below t: further raises rarely make room, dropping those nodes does.
      const bool deeper = d + 1 < D;  // grandchildren exist
      const float t2 =
          raise_threshold(s, le, t, best, n, row, lb,
                          deeper ? kTreeSampleChildren : kTreeSampleChildren * (1 + kTreeSampleGrandchildren),
                          deeper ? row + ldl : nullptr, deeper ? min(kTreeSampleGrandchildren, K) : 0);
      if (!(t2 > t)) return NAN;
      *reached = t = t2;
      total = grow_level(s, row, K, lb, le, d, t, false, kTreePoolCap, true, lr, &t);
      // still too many: drop the stale nodes and try once more (a fresh sweep regrows every
      // level: ~5x the cost)
      if (total < 0 && compact_pool(s, t, d, &lb, &le)) {
        lr_state.unread = true;  // compact_pool staged in the histograms' space and zeroes it
        total = grow_level(s, row, K, lb, le, d, t, false, kTreePoolCap, false, lr, &t);  // (nkids were not moved)
      }
      if (total < 0) return NAN;
    }
    if (total == 0) break;
    prev_width = le - lb;
    lb = le;
    le += total;
    if (lr && d + 1 < D && !s.level_more[lr->next]) {  // block-uniform (read after the grow's last barrier)
      // no new child has a child >= t (each one's first child was tried): the next level is
      // empty, so its grow (a full round) is skipped; t from the last sample, as it would give,
      // by warp 0 alone (the others read it after pool_close's barrier)
      if (threadIdx.x < kWarpSize) {
        const int bin = hist_nth_bin(lr->hist(s, lr->next), n);
        if (threadIdx.x == 0) s.level_t = fmaxf(t, HistBins(lr->t_fill, best).edge(bin));
      }
      skipped = true;
      ++d;
      break;
    }
  }
  if (closed) return t;  // (warp_tail closed the pool; the barrier after it published that)
  pool_close(s, lb, le, d);
  return skipped ? s.level_t : t;
}

// The tie path: decode the `ties` tied nodes (score == tstar) below the strict pool of
// `count_gt` nodes into tie_depth / tie_rank / tie_parent. Needs pre and size of the pool.
KD_DEVICE void decode_ties(TreeBuildSmem& s, const float* L, int ldl, int D, int K, float tstar, int count_gt, int ties,
                           int cap) {
  const int tid = static_cast<int>(threadIdx.x), threads = kTreeBuildThreads;
  // z_m for 1 <= m < D: tied children of a tied node at depth m; T(m) = 1 + z_m T(m+1)
  if (tid >= 1 && tid < D) s.tie_subtree[tid] = count_passing(tstar, L + static_cast<int64_t>(tid) * ldl, K, tstar, false);
  __syncthreads();
  if (tid == 0) {
    s.tie_subtree[D] = 1;
    for (int m = D - 1; m >= 1; --m) {
      const int64_t t = 1 + static_cast<int64_t>(s.tie_subtree[m]) * s.tie_subtree[m + 1];
      s.tie_subtree[m] = static_cast<int32_t>(t < cap ? t : cap);
    }
  }
  // tied nodes under each strict node, laid out by its post-order index: the order in which
  // their tied subtrees appear in preorder
  for (int i = tid; i <= count_gt; i += threads) s.u.tie.slot_by_post[s.pre[i] - s.depth[i] + s.size[i] - 1] = i;
  __syncthreads();  // tie_subtree ready too
  for (int i = tid; i <= count_gt; i += threads) {
    const int dep = s.depth[i];
    int64_t tied = 0;
    if (dep < D) {
      const int c = count_passing(s.score[i], L + static_cast<int64_t>(dep) * ldl, K, tstar, false) - s.nkids[i];
      tied = static_cast<int64_t>(c) * s.tie_subtree[dep + 1];
    }
    s.u.tie.base[s.pre[i] - dep + s.size[i] - 1] = static_cast<int32_t>(tied < cap ? tied : cap);
  }
  __syncthreads();
  block_exclusive_scan(s.u.tie.base, s.u.tie.base, count_gt + 1, s.scratch);
  for (int g = tid; g < ties; g += threads) {
    int lo = 0, hi = count_gt;  // last post-order index whose base <= g
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (s.u.tie.base[mid] <= g) lo = mid;
      else hi = mid - 1;
    }
    const int slot = s.u.tie.slot_by_post[lo];
    const int dep = s.depth[slot];
    const int sub = s.tie_subtree[dep + 1];
    const int i = g - s.u.tie.base[lo];
    const int j = i / sub;
    const int w = i - j * sub;
    const int tree_base = s.u.tie.base[lo] + j * sub;  // tied index of this subtree's root
    if (w == 0) {
      s.tie_parent[g] = slot;
      s.tie_rank[g] = static_cast<int16_t>(s.nkids[slot] + j);  // after the strict children
      s.tie_depth[g] = static_cast<int16_t>(dep + 1);
    } else {
      int cur = 0, m = dep + 1, rem = w - 1;  // cur: index of the current node in the subtree
      while (true) {
        const int below = s.tie_subtree[m + 1];
        const int c = rem / below;
        const int r2 = rem - c * below;
        if (r2 == 0) {
          s.tie_parent[g] = kTreeTieSlot + tree_base + cur;
          s.tie_rank[g] = static_cast<int16_t>(c);
          s.tie_depth[g] = static_cast<int16_t>(m + 1);
          break;
        }
        cur += 1 + c * below;
        ++m;
        rem = r2 - 1;
      }
    }
  }
  __syncthreads();  // u.tie is overwritten by the sort keys next
}

// B. Bisection over the ordered bits of t, a full grow per probe. Leaves in the pool either
// a set {score >= t} of n..2n nodes (returns t, *ties = 0) or, when exact ties at the
// threshold are too many for the pool, the strict set {score > t*} (returns -inf: all of it
// is taken; *tstar = t*, *ties = nodes still to take at t*). *n = min(budget, paths).
KD_DEVICE float bisection_search(TreeBuildSmem& s, const float* L, int ldl, int D, int K, int budget, int* n,
                                 float* tstar, int* ties) {
  const int all = grow_tree(s, L, ldl, D, K, -INFINITY, false, kTreeWindow + 1);  // every path?
  *n = min(budget, all);
  *ties = 0;
  const int window = min(2 * *n, kTreeWindow);
  if (all <= window) return -INFINITY;
  uint32_t lo = float_to_ordered(-INFINITY);
  uint32_t hi = float_to_ordered(__fadd_rn(0.0f, L[0]));  // the best node's score
  while (lo < hi) {
    const uint32_t mid = lo + ((hi - lo + 1) >> 1);
    const int c = grow_tree(s, L, ldl, D, K, ordered_to_float(mid), false, window + 1);
    if (c < *n) hi = mid - 1;
    else if (c <= window) return ordered_to_float(mid);  // the pool holds {score >= mid}
    else lo = mid;
  }
  *tstar = ordered_to_float(lo);
  const int strict = grow_tree(s, L, ldl, D, K, *tstar, true, kTreeStrictCap);
  *ties = *n - strict;
  return -INFINITY;
}

// One block per request. Dynamic shared memory: TreeBuildSmem, then (when staged) the
// request's logp rows [D, min(max_budget, topk)].
// kStaged: the rows are read from shared memory (known at compile time, so the searches use
// shared-memory loads rather than generic ones, with 32-bit addresses). kLevelRaise: the sweep
// raises t every level (LevelRaise; opt-in, TreeBuildPlan::level_raise); off, only when a
// level overflows. onepass: try the one-pass search first where it applies
// (tree_build_onepass.cuh; TreeBuildPlan::onepass), and fall back to these when it gives up.
template <bool kStaged, bool kLevelRaise>
KD_DEVICE void tree_build_block(const TreeBuildParams& p, bool onepass, uint8_t* smem_raw) {
  tree_clk_start();
  TREE_CLK_BEGIN(clk_total);
  TreeBuildSmem& s = *reinterpret_cast<TreeBuildSmem*>(smem_raw);

  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x), threads = kTreeBuildThreads;
  const int lane = tid % kWarpSize;
  const int D = p.depth;
  // the global reads that the whole launch waits on go out together: the request's scalars
  // and (staged) its rows, staged with the plan's stride min(topk, max_budget) so that they
  // need not wait for the budget
  const int budget = p.budget[b];
  const int32_t root_token = p.root_token ? p.root_token[b] : -1;
  const int32_t start = p.start_pos ? p.start_pos[b] : 0;
  const int64_t tok0 = static_cast<int64_t>(b) * D * p.topk;  // this request's rows
  const int k_stage = min(p.topk, p.max_budget);  // columns staged per row (tree_build_stage_bytes)
  const bool valid = budget >= 0 && budget <= p.max_budget;
  // the one-pass search: its own budget and depth limits, and staged rows of >= N columns
  const bool try_onepass = kStaged && onepass && valid && budget >= 1 && budget <= kOnePassMaxBudget &&
                           p.topk >= budget && D >= 1 && D <= kOnePassMaxDepth;  // block-uniform
  TREE_CLK_BEGIN(clk_stage);
  // the histograms start at zero: zeroed before the staging barrier, which publishes them for
  // the root's sample (sweep_search) that fills one before the first grow, or for the one-pass
  // search's threshold (onepass_clear)
  TreeOnePassSmem& ops = *reinterpret_cast<TreeOnePassSmem*>(smem_raw);
  if (try_onepass) {
    onepass_clear(ops);
  } else {
    hist_clear(s);
  }
  bool synced = false;  // a barrier since hist_clear
  if constexpr (kStaged) {
    if (D > 0 && k_stage > 0) {  // block-uniform (logp is non-null then: check_tree_build_params)
      const float* logp = p.logp + tok0;
      float* Ls = reinterpret_cast<float*>(smem_raw + kTreeBuildBaseSmem);
      // kTreeStageUnroll loads in flight before the stores (one global latency per batch,
      // not per element); the rows are one contiguous run when all topk columns are staged
      const int cells = D * k_stage;
      const bool dense = k_stage == p.topk;
      for (int i0 = tid; i0 < cells; i0 += threads * kTreeStageUnroll) {
        float v[kTreeStageUnroll];
#pragma unroll
        for (int u = 0; u < kTreeStageUnroll; ++u) {
          const int i = i0 + u * threads;
          if (i < cells) v[u] = logp[dense ? i : static_cast<int64_t>(i / k_stage) * p.topk + i % k_stage];
        }
#pragma unroll
        for (int u = 0; u < kTreeStageUnroll; ++u) {
          const int i = i0 + u * threads;
          if (i < cells) Ls[i] = v[u];
        }
      }
      __syncthreads();
      synced = true;
    }
  }
  TREE_CLK_END(clk_stage, 0);
  if (try_onepass) {  // (staged: k_stage >= budget columns, and a barrier since the zeros)
    KD_PHASE("onepass");
    const float* Ls = reinterpret_cast<const float*>(smem_raw + kTreeBuildBaseSmem);
    if (onepass_tree(p, ops, Ls, k_stage, D, budget, b, tok0, root_token, start)) {
      TREE_CLK_END(clk_total, 14);
      tree_clk_report(p.max_budget);
      return;  // block-uniform
    }
    KD_EVENT("onepass_gave_up", budget, 0);
    hist_clear(s);  // the one-pass search used the sweep's space: start it clean
    __syncthreads();
  }
  const int K = valid ? min(budget, p.topk) : 0;  // ranks >= N are never used

  int n = valid ? 0 : -1;  // nodes besides the root
  int chosen = 0;          // nodes taken from the sorted candidates; tied nodes follow
  bool tokens_staged = false;  // the candidates' tokens are in nkids (read during the rank sort)
  float tstar = 0.0f;      // the score of the tied nodes, when there are any
  if (valid && budget > 0 && D > 0 && K > 0) {
    const float* L = kStaged ? reinterpret_cast<const float*>(smem_raw + kTreeBuildBaseSmem) : p.logp + tok0;
    const int ldl = kStaged ? k_stage : p.topk;

    // A, or B when A cannot (K < N) or gives up
    KD_PHASE("sweep");
    TREE_CLK_BEGIN(clk_sweep);
    if (!synced) __syncthreads();  // block-uniform: hist_clear's zeros (the unstaged kernel)
    float t = NAN;
    if (K >= budget) {
      float from = L[budget - 1];  // the N-th best depth-1 score: N nodes of depth 1 reach it
      for (int sweep = 0; sweep < kTreeSweeps && t != t; ++sweep) {
        float reached;
        t = sweep_search(s, L, ldl, D, K, budget, from, &reached, kLevelRaise, sweep == 0);
        if (!(reached > from)) break;  // no better start for another sweep
        from = reached;
      }
    }
    TREE_CLK_END(clk_sweep, 1);
    int ties = 0;
    n = budget;
    if (t != t) {
      KD_PHASE("bisection");
      TREE_CLK_BEGIN(clk_bis);
      t = bisection_search(s, L, ldl, D, K, budget, &n, &tstar, &ties);
      TREE_CLK_END(clk_bis, 2);
    }
    const int end = s.level_begin[kTreeMaxDepth + 1];  // pool slots in use
    if (ties > 0) {
      KD_PHASE("ties");
      TREE_CLK_BEGIN(clk_ties);
      for (int i = tid; i < end; i += threads) {
        int pre, size;
        node_preorder(s, i, &pre, &size);
        s.pre[i] = static_cast<int16_t>(pre);
        s.size[i] = size;
      }
      __syncthreads();
      decode_ties(s, L, ldl, D, K, tstar, end - 1, ties, budget + 1);
      TREE_CLK_END(clk_ties, 3);
    }

    // C. candidates (score >= t), keyed ~score, preorder, slot (their tokens: loaded during the
    // rank sort, or at the emit after the bitonic one).
    // A sweep's bound can leave far more candidates than n: the pool holds every node >= t*,
    // so its n-th best is t*, and a histogram gets t to within a bin of it (a smaller sort).
    KD_PHASE("order");
    TREE_CLK_BEGIN(clk_narrow);
    // without the level raise the sweep's t is loose: narrow on the pool's size first
    if (!kLevelRaise && ties == 0 && end - 1 > 2 * n) t = raise_threshold(s, end, t, __fadd_rn(0.0f, L[0]), n);
    TREE_CLK_END(clk_narrow, 4);
    TREE_CLK_BEGIN(clk_keys);
    // compaction: a warp counts its candidates over all its trips, then takes its places with
    // one atomic (one shared-memory round trip, not one per trip)
    int16_t* cand_slot = s.final_idx;  // the candidates' slots, until the order is known
    auto collect = [&]() {
      if (tid == 0) s.counter = 0;
      __syncthreads();
      constexpr int kTrips = ceil_div(kTreePoolCap, kTreeBuildThreads);
      unsigned ballots[kTrips];
      int warp_count = 0;
#pragma unroll
      for (int trip = 0; trip < kTrips; ++trip) {
        const int i = 1 + trip * threads + tid;
        ballots[trip] = __ballot_sync(kFullMask, i < end && s.score[i] >= t);
        warp_count += __popc(ballots[trip]);
      }
      int at = 0;
      if (lane == 0 && warp_count > 0) at = atomicAdd(&s.counter, warp_count);
      at = __shfl_sync(kFullMask, at, 0);
#pragma unroll
      for (int trip = 0; trip < kTrips; ++trip) {
        if (ballots[trip] >> lane & 1u)
          cand_slot[at + __popc(ballots[trip] & ((1u << lane) - 1u))] = static_cast<int16_t>(1 + trip * threads + tid);
        at += __popc(ballots[trip]);
      }
      __syncthreads();
      return s.counter;
    };
    int cands = collect();
    KD_EVENT("cands", cands, end);
    // with the level raise t is most often within a bin of t* already: narrow (and collect
    // again) only when the candidates are too many for the rank sort and more than 2n
    if (kLevelRaise && ties == 0 && cands > max(2 * n, threads)) {  // block-uniform
      TREE_CLK_RESTART(clk_narrow);
      t = raise_threshold(s, end, t, __fadd_rn(0.0f, L[0]), n);  // (every thread has read the counter)
      TREE_CLK_END(clk_narrow, 4);
      cands = collect();
    }
    chosen = ties > 0 ? cands : n;
    // key of candidate j: ~score, preorder, slot (distinct: the slot is in it)
    auto key_of = [&](int j) {
      const int i = cand_slot[j];
      int pre = 0;
      if (ties > 0) pre = s.pre[i];
      else node_preorder(s, i, &pre, nullptr);
      return (static_cast<uint64_t>(~float_to_ordered(s.score[i])) << 32) |
             (static_cast<uint32_t>(pre) << kTreeSlotBits) | static_cast<uint32_t>(i);
    };
    TREE_CLK_BEGIN(clk_sort);  // (restarted below, once the keys are built)
    if (cands <= threads) {
      // one key per thread: a rank sort (see rank_sort_keys), no global network
      const uint64_t key = tid < cands ? key_of(tid) : ~uint64_t{0};
      // the candidate's token: its global load is in flight during the sort, not at the emit
      int32_t token = 0;
      if (tid < cands) {
        const int i = cand_slot[tid];
        token = p.tok[tok0 + static_cast<int64_t>(s.depth[i] - 1) * p.topk + s.rank[i]];
      }
      TREE_CLK_END(clk_keys, 5);
      TREE_CLK_RESTART(clk_sort);
      const int rank = rank_sort_keys(s.u.keys, key, cands);
      tokens_staged = true;
      if (tid < cands) {
        s.nkids[static_cast<uint32_t>(key) & 0xffffu] = token;  // nkids is free after the search
        s.u.keys[rank] = key;
        if (rank < chosen) s.final_idx[static_cast<uint32_t>(key) & 0xffffu] = static_cast<int16_t>(rank + 1);
      }
      if (tid == 0) s.final_idx[0] = 0;
      __syncthreads();
    } else {
      for (int j = tid; j < cands; j += threads) s.u.keys[j] = key_of(j);
      const int sort_n = block_sort_length(cands);
      for (int i = cands + tid; i < sort_n; i += threads) s.u.keys[i] = ~uint64_t{0};
      __syncthreads();
      TREE_CLK_END(clk_keys, 5);
      TREE_CLK_RESTART(clk_sort);
      block_sort_ascending(s.u.keys, sort_n);
      if (tid == 0) s.final_idx[0] = 0;
      for (int i = tid; i < chosen; i += threads)
        s.final_idx[static_cast<uint32_t>(s.u.keys[i]) & 0xffffu] = static_cast<int16_t>(i + 1);
      __syncthreads();
    }
    TREE_CLK_END(clk_sort, 6);
  }

  // emit every row of the request's output (rows past n are padding)
  KD_PHASE("emit");
  TREE_CLK_BEGIN(clk_emit);
  emit_tree_rows(p, b, n, root_token, start, s.out_parent, [&](int i) {
    TreeRow r;
    if (i <= chosen) {
      const int slot = static_cast<int>(static_cast<uint32_t>(s.u.keys[i - 1]) & 0xffffu);
      r.depth = s.depth[slot];
      r.parent = s.final_idx[s.parent[slot]];
      r.score = s.score[slot];
      r.token = tokens_staged ? s.nkids[slot] : p.tok[tok0 + static_cast<int64_t>(r.depth - 1) * p.topk + s.rank[slot]];
    } else {
      const int g = i - chosen - 1;
      r.depth = s.tie_depth[g];
      const int code = s.tie_parent[g];
      r.parent = code >= kTreeTieSlot ? chosen + 1 + (code - kTreeTieSlot) : s.final_idx[code];
      r.score = tstar;
      r.token = p.tok[tok0 + static_cast<int64_t>(r.depth - 1) * p.topk + s.tie_rank[g]];
    }
    return r;
  });
  TREE_CLK_END(clk_emit, 7);
  TREE_CLK_BEGIN(clk_vis);
  // visibility: into the sort keys' space, free after the emit
  emit_vis_rows(p, b, n, s.out_parent, reinterpret_cast<uint32_t*>(s.u.keys),
                static_cast<int>(sizeof(s.u.keys) / sizeof(uint32_t)));
  TREE_CLK_END(clk_vis, 8);
  TREE_CLK_END(clk_total, 14);
  tree_clk_report(p.max_budget);
}

// kBlocksPerSM 2 (64 registers, a few spills): a batch of up to 2 x SMs requests runs in one
// wave. 1 (the body needs ~80-90 registers: no spills) for batches that fill one wave anyway,
// measured faster at every such batch (docs/kernels/tree_build.md). One kernel per kStaged (a single body per kernel: with both in one, registers
// spill far more).
template <bool kStaged, bool kLevelRaise, int kBlocksPerSM>
__global__ void __launch_bounds__(kTreeBuildThreads, kBlocksPerSM) tree_build_kernel(const TreeBuildParams p, bool onepass) {
  KD_DYNAMIC_SMEM(uint8_t, smem_raw);
  tree_build_block<kStaged, kLevelRaise>(p, onepass, smem_raw);
}

using TreeBuildKernel = void (*)(const TreeBuildParams, bool);

// The kernel a plan launches (TreeBuildPlan::staged, level_raise, lone). The opt-in level raise
// has no lone instances (each instance is a minute of nvcc).
inline TreeBuildKernel tree_build_kernel_for(bool staged, bool level_raise, bool lone) {
  if (level_raise) return staged ? tree_build_kernel<true, true, 2> : tree_build_kernel<false, true, 2>;
  if (lone) return staged ? tree_build_kernel<true, false, 1> : tree_build_kernel<false, false, 1>;
  return staged ? tree_build_kernel<true, false, 2> : tree_build_kernel<false, false, 2>;
}

}  // namespace kdtree::kern
