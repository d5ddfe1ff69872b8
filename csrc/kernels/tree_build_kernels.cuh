// Device code of tree_build (the host API is tree_build.cuh; the launcher tree_build.cu).
//
// The tree is the first N nodes of the total order (score desc, rank path asc), and every
// set {score >= t} is closed under parents (logp <= 0). One block per request:
//   A. search: bisection on t over the float's ordered bit pattern. Each probe grows
//      {score >= t} level by level into a node pool (a node's passing children are a prefix
//      of its sorted row: one binary search each; a block scan allocates their slots) and
//      stops once the pool would overflow. A probe that finds between N_eff and 2 N_eff
//      nodes ends the search: its pool holds the answer (N_eff = min(N, number of paths)).
//   B. otherwise (ties too big for the pool) the search ends at t* = the largest t with
//      count(score >= t) >= N_eff; the pool is regrown with every node scoring > t* (fewer
//      than N_eff), and the M = N_eff - count_gt nodes scoring exactly t* that come first by
//      rank path are decoded: a node scoring t* can only have tied children (ranks < z_m,
//      the same for all of them at depth m), so the tied nodes hang off the strict tree as
//      complete subtrees of known size, in rank-path order strict node by strict node in
//      post-order.
//   C. order: the pool's nodes sorted by (score desc, preorder = rank-path order) with a
//      bitonic sort; the first ones (then the tied nodes, in preorder) are the tree; parents
//      are mapped to final indices; rows and bit-packed visibility written.
#pragma once

#include "block_scan.cuh"
#include "device_compat.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"

namespace kdtree::kern {

constexpr int kTreeBuildThreads = 512;              // threads per request block
constexpr int kTreeWindow = 2 * kTreeMaxNodes;      // a probe set this small ends the search
constexpr int kTreePoolCap = kTreeWindow + 1;       // node slots: the root and the window
constexpr int kTreeSortCap = kTreeWindow;           // power of two >= any pool node count
constexpr int kTreeStrictCap = kTreeMaxNodes + 1;   // strict-set slots in the tie path (< N + 1)
constexpr int kTreeTieSlot = 1 << 14;               // tie_parent codes >= this name a tied node
static_assert((kTreeSortCap & (kTreeSortCap - 1)) == 0, "bitonic sort needs a power of two");
static_assert(kTreePoolCap < 32768 && kTreeTieSlot > kTreeStrictCap, "slots must fit int16");

struct TreeBuildSmem {
  // phase-local scratch, one phase at a time: the preorder scan, then the tie bookkeeping,
  // then the sort keys (~ordered score << 32 | preorder)
  union {
    uint64_t keys[kTreeSortCap];
    int32_t scan[kTreePoolCap];  // exclusive scan of size over the pool
    struct {
      int32_t base[kTreeStrictCap];  // tied-node counts by post-order index, then their scan
      int32_t slot_by_post[kTreeStrictCap];
    } tie;
  } u;
  // the node pool: slot 0 is the root, then depth 1, depth 2, ... each level contiguous and
  // in rank-path order (children grouped by parent, ranks ascending)
  float score[kTreePoolCap];
  int32_t nkids[kTreePoolCap];   // children that passed the probe's test
  int32_t first[kTreePoolCap];   // offset of the first child within the next level
  int32_t size[kTreePoolCap];    // subtree size within the pool
  int32_t tie_parent[kTreeMaxNodes];  // strict slot, or kTreeTieSlot + tied index
  int32_t level_begin[kTreeMaxDepth + 2];  // first slot of each depth; [d+1] ends depth d
  int32_t tie_subtree[kTreeMaxDepth + 2];  // T(m): nodes in a tied subtree rooted at depth m
  BlockScratch<int32_t> scratch;
  int16_t parent[kTreePoolCap];  // parent slot
  int16_t rank[kTreePoolCap];    // rank in its depth's sorted row
  int16_t depth[kTreePoolCap];
  int16_t pre[kTreePoolCap];     // preorder index within the pool
  int16_t slot_by_pre[kTreePoolCap];
  int16_t final_idx[kTreePoolCap];  // node index of a selected slot
  int16_t out_parent[kTreeMaxNodes + 1];  // parent node index of every emitted node
  int16_t tie_depth[kTreeMaxNodes];
  int16_t tie_rank[kTreeMaxNodes];
};

// Dynamic shared memory of one request block, and whether the logp rows are staged in it
// too (they are read from global memory otherwise).
constexpr size_t kTreeBuildBaseSmem = (sizeof(TreeBuildSmem) + 15) / 16 * 16;
inline size_t tree_build_base_smem() { return kTreeBuildBaseSmem; }
inline size_t tree_build_stage_bytes(int depth, int topk, int max_budget) {
  const int k = topk < max_budget ? topk : max_budget;
  return sizeof(float) * static_cast<size_t>(depth) * static_cast<size_t>(k > 0 ? k : 0);
}
inline size_t tree_build_smem_size(int depth, int topk, int max_budget, size_t smem_limit) {
  const size_t staged = tree_build_base_smem() + tree_build_stage_bytes(depth, topk, max_budget);
  return staged <= smem_limit ? staged : tree_build_base_smem();
}

// Children k of a node with score s (row = the sorted logp of the children's depth) whose
// score fadd(s, row[k]) passes t: a prefix of the row, found by binary search.
KD_DEVICE int count_passing(float s, const float* row, int K, float t, bool strict) {
  int lo = 0, hi = K;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    const float v = __fadd_rn(s, row[mid]);
    if (strict ? v > t : v >= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Grow {nodes with score > t (strict) or >= t} into the pool, level by level (row d of the
// logp at L + d * ldl). Stops as soon as `limit` nodes are reached and returns that count
// (>= limit); otherwise returns the full count with the levels in place. Every thread of the
// block calls it.
KD_DEVICE int grow_tree(TreeBuildSmem& s, const float* L, int ldl, int D, int K, float t, bool strict, int limit) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  if (tid == 0) {
    s.score[0] = 0.0f;
    s.parent[0] = -1;
    s.rank[0] = -1;
    s.depth[0] = 0;
    s.level_begin[0] = 0;
    s.level_begin[1] = 1;
  }
  __syncthreads();
  int count = 0, lb = 0, le = 1, d = 0;
  for (; d < D && lb < le; ++d) {
    const float* row = L + static_cast<int64_t>(d) * ldl;
    for (int i = lb + tid; i < le; i += threads) s.nkids[i] = count_passing(s.score[i], row, K, t, strict);
    __syncthreads();
    const int total = block_exclusive_scan(s.nkids + lb, s.first + lb, le - lb, s.scratch);
    if (count + total >= limit) return count + total;  // uniform: total comes from shared memory
    for (int j = tid; j < total; j += threads) {
      int lo = lb, hi = le - 1;  // the parent: last slot with first <= j
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (s.first[mid] <= j) lo = mid;
        else hi = mid - 1;
      }
      const int k = j - s.first[lo];
      const int slot = le + j;
      s.score[slot] = __fadd_rn(s.score[lo], row[k]);
      s.parent[slot] = static_cast<int16_t>(lo);
      s.rank[slot] = static_cast<int16_t>(k);
      s.depth[slot] = static_cast<int16_t>(d + 1);
    }
    if (tid == 0) s.level_begin[d + 2] = le + total;
    count += total;
    lb = le;
    le += total;
    __syncthreads();
  }
  // the last level has no children (depth D, or nothing passed); later levels are empty
  for (int i = lb + tid; i < le; i += threads) {
    s.nkids[i] = 0;
    s.first[i] = 0;
  }
  if (tid == 0)
    for (int e = d + 2; e <= kTreeMaxDepth + 1; ++e) s.level_begin[e] = le;
  __syncthreads();
  return count;
}

// Subtree sizes and preorder (= rank-path order) of the pool's `pool_n` nodes below the root.
KD_DEVICE void pool_preorder(TreeBuildSmem& s, int D, int pool_n) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (int i = tid; i <= pool_n; i += threads) s.size[i] = 1;
  __syncthreads();
  for (int d = D; d >= 1; --d) {  // deepest level first
    for (int i = s.level_begin[d] + tid; i < s.level_begin[d + 1]; i += threads) atomicAdd(&s.size[s.parent[i]], s.size[i]);
    __syncthreads();
  }
  // a node follows its parent and the subtrees of its earlier siblings, which are
  // contiguous in the pool: one scan of sizes gives their sums
  block_exclusive_scan(s.size, s.u.scan, pool_n + 1, s.scratch);
  if (tid == 0) s.pre[0] = 0;
  __syncthreads();
  for (int d = 1; d <= D; ++d) {
    for (int i = s.level_begin[d] + tid; i < s.level_begin[d + 1]; i += threads) {
      const int par = s.parent[i];
      const int first_sibling = s.level_begin[d] + s.first[par];
      s.pre[i] = static_cast<int16_t>(s.pre[par] + 1 + s.u.scan[i] - s.u.scan[first_sibling]);
    }
    __syncthreads();
  }
}

// The tie path: decode the `ties` tied nodes (score == tstar) below the strict pool of
// `count_gt` nodes into tie_depth / tie_rank / tie_parent.
KD_DEVICE void decode_ties(TreeBuildSmem& s, const float* L, int ldl, int D, int K, float tstar, int count_gt, int ties,
                           int cap) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
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

// One block per request. Dynamic shared memory: TreeBuildSmem, then (when `staged`) the
// request's logp rows [D, min(budget, topk)].
__global__ void __launch_bounds__(kTreeBuildThreads) tree_build_kernel(const TreeBuildParams p, bool staged) {
  KD_DYNAMIC_SMEM(uint8_t, smem_raw);
  TreeBuildSmem& s = *reinterpret_cast<TreeBuildSmem*>(smem_raw);

  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int D = p.depth;
  const int budget = p.budget[b];
  const bool valid = budget >= 0 && budget <= p.max_budget;
  const int K = valid ? min(budget, p.topk) : 0;  // ranks >= N are never used

  int n = valid ? 0 : -1;  // nodes besides the root
  int chosen = 0;          // nodes taken from the pool (the first `chosen` after the sort)
  float tstar = 0.0f;      // the score of the tied nodes, when there are any
  if (valid && budget > 0 && D > 0 && K > 0) {
    const float* logp = p.logp + static_cast<int64_t>(b) * D * p.topk;
    const float* L = logp;
    int ldl = p.topk;
    if (staged) {
      float* Ls = reinterpret_cast<float*>(smem_raw + kTreeBuildBaseSmem);
      for (int i = tid; i < D * K; i += threads) Ls[i] = logp[static_cast<int64_t>(i / K) * p.topk + i % K];
      __syncthreads();
      L = Ls;
      ldl = K;
    }

    // A. the search
    int pool_n = grow_tree(s, L, ldl, D, K, -INFINITY, false, kTreeWindow + 1);  // every path?
    n = min(budget, pool_n);
    const int window = min(2 * n, kTreeWindow);
    bool materialized = pool_n <= window;
    if (!materialized) {
      uint32_t lo = float_to_ordered(-INFINITY);
      uint32_t hi = float_to_ordered(__fadd_rn(0.0f, L[0]));  // the best node's score
      while (lo < hi) {
        const uint32_t mid = lo + ((hi - lo + 1) >> 1);
        const int c = grow_tree(s, L, ldl, D, K, ordered_to_float(mid), false, window + 1);
        if (c < n) {
          hi = mid - 1;
        } else if (c <= window) {
          pool_n = c;  // the pool holds {score >= mid}: the tree is its first n nodes
          materialized = true;
          break;
        } else {
          lo = mid;
        }
      }
      if (!materialized) tstar = ordered_to_float(lo);
    }

    // B. ties too big for the pool: the strict set, then the tied nodes
    int ties = 0;
    if (materialized) {
      chosen = n;
    } else {
      pool_n = grow_tree(s, L, ldl, D, K, tstar, true, kTreeStrictCap);
      chosen = pool_n;
      ties = n - pool_n;
    }
    pool_preorder(s, D, pool_n);
    if (ties > 0) decode_ties(s, L, ldl, D, K, tstar, pool_n, ties, budget + 1);

    // C. the pool's nodes in (score desc, preorder asc) order; tied nodes follow in preorder
    int sort_n = 1;
    while (sort_n < pool_n) sort_n <<= 1;
    for (int i = tid; i < sort_n; i += threads) {
      if (i < pool_n) {
        const int slot = i + 1;
        s.u.keys[i] = (static_cast<uint64_t>(~float_to_ordered(s.score[slot])) << 32) | static_cast<uint32_t>(s.pre[slot]);
        s.slot_by_pre[s.pre[slot]] = static_cast<int16_t>(slot);
      } else {
        s.u.keys[i] = ~uint64_t{0};
      }
    }
    __syncthreads();
    block_bitonic_sort(s.u.keys, sort_n);
    if (tid == 0) s.final_idx[0] = 0;
    for (int i = tid; i < chosen; i += threads)
      s.final_idx[s.slot_by_pre[static_cast<uint32_t>(s.u.keys[i])]] = static_cast<int16_t>(i + 1);
    __syncthreads();
  }

  // emit every row of the request's output (rows past n are padding)
  const int rows = p.max_nodes + 1;
  const int64_t row0 = static_cast<int64_t>(b) * rows;
  const int32_t root_token = p.root_token ? p.root_token[b] : -1;
  const int32_t start = p.start_pos ? p.start_pos[b] : 0;
  for (int i = tid; i < rows; i += threads) {
    int32_t token = -1, dep = -1, par = -1;
    float sc = 0.0f;
    if (i == 0 && n >= 0) {
      token = root_token;
      dep = 0;
    } else if (i <= n) {
      int rk;
      if (i <= chosen) {
        const int slot = s.slot_by_pre[static_cast<uint32_t>(s.u.keys[i - 1])];
        dep = s.depth[slot];
        rk = s.rank[slot];
        par = s.final_idx[s.parent[slot]];
        sc = s.score[slot];
      } else {
        const int g = i - chosen - 1;
        dep = s.tie_depth[g];
        rk = s.tie_rank[g];
        const int code = s.tie_parent[g];
        par = code >= kTreeTieSlot ? chosen + 1 + (code - kTreeTieSlot) : s.final_idx[code];
        sc = tstar;
      }
      token = p.tok[(static_cast<int64_t>(b) * D + (dep - 1)) * p.topk + rk];
    }
    if (i <= n) s.out_parent[i] = static_cast<int16_t>(par);
    p.tokens[row0 + i] = token;
    p.depth_out[row0 + i] = dep;
    p.parent[row0 + i] = par;
    if (p.score) p.score[row0 + i] = sc;
    if (p.positions) p.positions[row0 + i] = dep >= 0 ? start + dep : -1;
  }
  if (tid == 0) p.n_out[b] = n;
  __syncthreads();

  // visibility: one warp per row; lane l owns words l, l+32, ... and walks the ancestors
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = threads / kWarpSize;
  for (int i = warp; i < rows; i += warps) {
    uint32_t* out = p.vis + (row0 + i) * p.vis_words;
    for (int w = lane; w < p.vis_words; w += kWarpSize) {
      uint32_t bits = 0;
      if (i <= n) {
        for (int a = i;; a = s.out_parent[a]) {
          if (a / 32 == w) bits |= 1u << (a % 32);
          if (a == 0) break;
        }
      }
      out[w] = bits;
    }
  }
}

}  // namespace kdtree::kern
