// What tree_build's two searches share (tree_build_onepass.cuh, tree_build_kernels.cuh): the
// block size, the phase clocks of a measuring build, the searches of a sorted row, the rank
// sort of up to one key per thread, and the emit of a request's rows and visibility rows.
#pragma once

#include "block_sort.cuh"
#include "device_compat.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"

namespace kdtree::kern {

// threads per request block (256 was slower at every measured shape, docs/kernels/tree_build.md;
// 128 breaks N = 1024 trees)
constexpr int kTreeBuildThreads = 512;
constexpr int kTreeBuildWarps = kTreeBuildThreads / kWarpSize;

// How many leading indices of [0, n) satisfy `pass` (true on a prefix, then false). Steps of
// four: three probes per step whose loads are in flight together, so about half the dependent
// steps of a binary search (the latency between barriers is what a launch costs).
template <class Pass>
KD_DEVICE int count_leading(int n, Pass pass) {
  if (n <= 0) return 0;
  int s = 1 << ((31 - __clz(n)) & ~1);  // the largest power of 4 <= n: the answer (0..n) fits in 4 s values
  int pos = 0;  // every index < pos passes
  for (; s > 0; s >>= 2) {
    const int a = pos + s - 1, b = a + s, c = b + s;
    const bool pa = a < n && pass(a), pb = b < n && pass(b), pc = c < n && pass(c);
    pos += (static_cast<int>(pa) + static_cast<int>(pb) + static_cast<int>(pc)) * s;  // a prefix of the three
  }
  return pos;
}

// count_leading for answers that are usually small (a node's children near the final
// threshold: none, or a few): a first step probes 0, 3, 15 and 63 together, which brackets the
// answer in [0, 1), [1, 4), [4, 16), [16, 64) or [64, n]; steps of four inside the bracket
// follow. A leaf costs one step, a node with 1-3 children two (count_leading: 5 for n = 256).
template <class Pass>
KD_DEVICE int count_leading_small(int n, Pass pass) {
  const bool p0 = 0 < n && pass(0), p3 = 3 < n && pass(3), p15 = 15 < n && pass(15), p63 = 63 < n && pass(63);
  if (!p0) return 0;
  const int lo = p63 ? 64 : p15 ? 16 : p3 ? 4 : 1;  // every index < lo passes
  const int hi = p63 ? n : p15 ? 63 : p3 ? 15 : 3;  // hi fails (or is n)
  return lo + count_leading(min(hi, n) - lo, [&](int x) { return pass(lo + x); });
}

// Warp-collective: the lane whose items hold position `at` of the warp's concatenated items,
// given each lane's inclusive prefix count `incl` (the lanes before it have all their items
// before `at`): a halving search over the lanes' prefixes.
KD_DEVICE int lane_holding(int incl, int at) {
  int q = 0;
#pragma unroll
  for (int step = kWarpSize / 2; step >= 1; step >>= 1)
    if (__shfl_sync(kFullMask, incl, q + step - 1) <= at) q += step;
  return q;
}

// Children k of a node with score s (row = the sorted logp of the children's depth) whose
// score fadd(s, row[k]) passes t: a prefix of the row (K: its length, or any known upper bound
// of the count).
KD_DEVICE int count_passing(float s, const float* row, int K, float t, bool strict) {
  return count_leading(K, [&](int k) {
    const float v = __fadd_rn(s, row[k]);
    return strict ? v > t : v >= t;
  });
}

// Histogram bins over ordered float bits: [t, best] in 2^kBits bins (scores below t are not
// counted; the top bin takes everything above).
template <int kBits>
struct ThresholdBins {
  uint32_t lo;
  int shift;
  // shift: the smallest with (hi - lo) >> shift < 2^kBits (the range's bit width less kBits)
  KD_DEVICE ThresholdBins(float t, float best) : lo(float_to_ordered(t)) {
    const uint32_t range = float_to_ordered(best) - lo;
    shift = max(0, (32 - __clz(static_cast<int>(range))) - kBits);
  }
  KD_DEVICE uint32_t bin(uint32_t key) const { return min((key - lo) >> shift, (1u << kBits) - 1u); }
  // the lower edge of bin b: at least n scores reach it when b is their n-th best's bin
  KD_DEVICE float edge(int b) const { return ordered_to_float(lo + (static_cast<uint32_t>(b) << shift)); }
};

// Rank of this thread's key among the block's keys (one per thread; the keys of threads >=
// `count` are ~0, the real ones distinct and smaller), for count <= kTreeBuildThreads. Each warp
// sorts its 32 keys in registers (shuffles, no barrier) and stores them as a sorted run;
// a key's rank is then the number of smaller keys in every run, found by binary searches that
// are independent of each other (all in flight at once). Two barriers, against a bitonic
// network's ~40 dependent steps. `runs` must hold kTreeBuildThreads keys; the returned rank
// is meaningful for tid < count. Ends with a barrier: the caller may then overwrite `runs`.
KD_DEVICE int rank_sort_keys(uint64_t* runs, uint64_t key, int count) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  const int nruns = ceil_div(count, kWarpSize);  // warps past them hold padding only: idle
  if (tid / kWarpSize < nruns) {  // warp-uniform
    uint64_t r[1] = {key};
    for (int k = 2; k <= kWarpSize; k <<= 1) sort_detail::register_steps<1>(r, tid, k, k >> 1);
    // the bitonic network sorts runs of odd warps descending (element index bit 5 set): store
    // every run ascending
    const bool descending = (tid & kWarpSize) != 0;
    runs[tid - lane + (descending ? kWarpSize - 1 - lane : lane)] = r[0];
  }
  __syncthreads();
  int rank = 0;
  if (tid < count) {
    // kRankBatch searches in flight at a time (more would spill registers)
    constexpr int kRankBatch = 8;
    for (int v0 = 0; v0 < nruns; v0 += kRankBatch) {
      int pos[kRankBatch];
#pragma unroll
      for (int v = 0; v < kRankBatch; ++v) pos[v] = 0;
#pragma unroll
      for (int step = kWarpSize / 2; step >= 1; step >>= 1)
#pragma unroll
        for (int v = 0; v < kRankBatch; ++v)
          if (v0 + v < nruns && runs[(v0 + v) * kWarpSize + pos[v] + step - 1] < key) pos[v] += step;
#pragma unroll
      for (int v = 0; v < kRankBatch; ++v)
        if (v0 + v < nruns) rank += pos[v] + (runs[(v0 + v) * kWarpSize + pos[v]] < key ? 1 : 0);
    }
  }
  __syncthreads();  // the runs are read; the caller may overwrite them
  return rank;
}

// One output row of a request's tree (tree_build.cuh's outputs).
struct TreeRow {
  int32_t token = -1, depth = -1, parent = -1;
  float score = 0.0f;
};

// Every row 0..max_nodes of request b (row_of(i) for 1 <= i <= n; the root is row 0, rows
// past n are padding), n_out[b], and out_parent[i] for i <= n (read by emit_vis_rows). Every
// thread of the block calls it; ends with a barrier.
template <class RowOf>
KD_DEVICE void emit_tree_rows(const TreeBuildParams& p, int b, int n, int32_t root_token, int32_t start,
                              int16_t* out_parent, RowOf row_of) {
  const int tid = static_cast<int>(threadIdx.x);
  const int rows = p.max_nodes + 1;
  const int64_t row0 = static_cast<int64_t>(b) * rows;
  for (int i = tid; i < rows; i += kTreeBuildThreads) {
    TreeRow r;
    if (i == 0 && n >= 0) {
      r.token = root_token;
      r.depth = 0;
    } else if (i <= n) {
      r = row_of(i);
    }
    if (i <= n) out_parent[i] = static_cast<int16_t>(r.parent);
    p.tokens[row0 + i] = r.token;
    p.depth_out[row0 + i] = r.depth;
    p.parent[row0 + i] = r.parent;
    if (p.score) p.score[row0 + i] = r.score;
    if (p.positions) p.positions[row0 + i] = r.depth >= 0 ? start + r.depth : -1;
  }
  if (tid == 0) p.n_out[b] = n;
  __syncthreads();
}

// The visibility rows of request b from out_parent (emit_tree_rows): a thread per row walks
// its ancestors (indices fall along the walk), filling the row's words from the last down,
// into `buf` (buf_words of shared memory, free for this), then the rows go out as contiguous
// words. Written straight from the walk, each word of a warp's store landed in its own 32-byte
// sector (~30x the bytes). Every thread of the block calls it.
KD_DEVICE void emit_vis_rows(const TreeBuildParams& p, int b, int n, const int16_t* out_parent, uint32_t* buf,
                             int buf_words) {
  const int tid = static_cast<int>(threadIdx.x);
  const int rows = p.max_nodes + 1;
  const int64_t row0 = static_cast<int64_t>(b) * rows;
  const int vw = p.vis_words;
  auto row_bits = [&](int i, uint32_t* out) {
    int a = i <= n ? i : -1;
    for (int w = vw - 1; w >= 0; --w) {
      uint32_t bits = 0;
      while (a >= 0 && (a >> 5) == w) {
        bits |= 1u << (a & 31);
        a = a == 0 ? -1 : out_parent[a];
      }
      out[w] = bits;
    }
  };
  const int chunk = vw <= buf_words ? buf_words / vw : 0;  // rows per pass through buf
  if (chunk == 0) {  // rows wider than the buffer: straight out
    for (int i = tid; i < rows; i += kTreeBuildThreads) row_bits(i, p.vis + (row0 + i) * vw);
  } else {
    for (int r0 = 0; r0 < rows; r0 += chunk) {
      const int nr = min(chunk, rows - r0);
      for (int i = tid; i < nr; i += kTreeBuildThreads) row_bits(r0 + i, buf + i * vw);
      __syncthreads();
      uint32_t* dst = p.vis + (row0 + r0) * vw;
      for (int j = tid; j < nr * vw; j += kTreeBuildThreads) dst[j] = buf[j];
      if (r0 + chunk < rows) __syncthreads();  // buf is rewritten by the next pass
    }
  }
}

}  // namespace kdtree::kern

// Per-phase cycle counts on the GPU: a measuring build (-DKD_TREE_PHASE_CLOCKS, e.g. through
// NVCC_APPEND_FLAGS; csrc/dev/tree_build_clocks.cuh). In the library the marks are empty.
// Slots 0-14: the sweep (tree_build_kernels.cuh) and the shared order/emit phases; 16-21: the
// one-pass search (tree_build_onepass.cuh); 15: launches.
namespace kdtree::kern {
constexpr int kTreeClkOnePass = 16;  // one-pass launches (their grown levels: slot 17)
constexpr int kTreeClkOnePassDetail = 22;  // 22..31: the one-pass search's steps (thread 0's view)
constexpr int kTreeClkWarpDetail = 32;     // 32..36: the levels thread 0's warp grows alone
}  // namespace kdtree::kern
#if defined(KD_TREE_PHASE_CLOCKS) && defined(__CUDACC__) && !defined(KD_SIMT_EMULATION)
#include "dev/tree_build_clocks.cuh"
#else
namespace kdtree::kern {
KD_DEVICE void tree_clk_start() {}
KD_DEVICE void tree_clk_report(int) {}
}  // namespace kdtree::kern
#define TREE_CLK_BEGIN(var) ((void)0)
#define TREE_CLK_RESTART(var) ((void)0)
#define TREE_CLK_END(var, slot) ((void)0)
#define TREE_CLK_COUNT(slot) ((void)0)
#endif
