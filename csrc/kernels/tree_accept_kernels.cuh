// Device code of tree_accept and cache_compact (host API: tree_accept.cuh).
//
// tree_accept: one block per request walks from the root. At each node the target's choice
// is read (or, greedy, the block takes the argmax of that node's logits row: only the rows
// on the path are read); the block then looks for the child carrying it (children have
// larger indices; siblings carry distinct tokens, so at most one matches).
//
// cache_compact: rows move to lower positions (a_j >= j), and row j's destination may be a
// later row's source. Each thread owns a set of columns and copies them row by row in
// increasing j, so every source element is read before any write can reach it: no
// barrier, no staging.
#pragma once

#include "device_compat.cuh"
#include "tree_accept.cuh"

namespace kdtree::kern {

constexpr int kAcceptThreads = 256;
constexpr int kCompactThreads = 256;

struct AcceptSmem {
  float best_val[kAcceptThreads / kWarpSize];
  int best_idx[kAcceptThreads / kWarpSize];
  int choice;
  int child;
};

// Argmax of row[0, V) with the lowest index on ties (NaN never wins). Every thread calls.
KD_DEVICE int block_argmax(const float* row, int V, AcceptSmem& s) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, warps = threads / kWarpSize;
  float bv = -INFINITY;
  int bi = V;  // "none yet": larger than any index
  for (int i = tid; i < V; i += threads) {
    const float v = row[i];
    if (v > bv || (v == bv && i < bi)) {
      bv = v;
      bi = i;
    }
  }
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, bv, d);
    const int oi = __shfl_xor_sync(kFullMask, bi, d);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    s.best_val[warp] = bv;
    s.best_idx[warp] = bi;
  }
  __syncthreads();
  if (tid == 0) {
    float v = s.best_val[0];
    int i = s.best_idx[0];
    for (int w = 1; w < warps; ++w)
      if (s.best_val[w] > v || (s.best_val[w] == v && s.best_idx[w] < i)) {
        v = s.best_val[w];
        i = s.best_idx[w];
      }
    s.choice = i < V ? i : 0;  // a row of only NaN/-inf: token 0, as numpy's argmax gives
  }
  __syncthreads();
  return s.choice;
}

__global__ void __launch_bounds__(kAcceptThreads) tree_accept_kernel(const TreeAcceptParams p) {
  __shared__ AcceptSmem s;
  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int64_t r0 = static_cast<int64_t>(b) * p.rows;
  int32_t* acc = p.accepted + static_cast<int64_t>(b) * p.max_path;
  const int n = p.n[b];
  if (n < 0 || n >= p.rows) {  // no tree for this request (tree_build's bad-budget marker)
    for (int j = tid; j < p.max_path; j += threads) acc[j] = -1;
    if (tid == 0) {
      p.accept_len[b] = 0;
      p.bonus[b] = -1;
    }
    return;
  }
  int node = 0, len = 1, choice = -1;
  if (tid == 0) acc[0] = 0;
  while (true) {
    if (p.choice) {
      choice = p.choice[r0 + node];
    } else {
      choice = block_argmax(p.logits + (r0 + node) * static_cast<int64_t>(p.vocab), p.vocab, s);
    }
    if (tid == 0) s.child = -1;
    __syncthreads();
    for (int i = node + 1 + tid; i <= n; i += threads)
      if (p.parent[r0 + i] == node && p.tokens[r0 + i] == choice) s.child = i;  // unique
    __syncthreads();
    const int child = s.child;
    __syncthreads();  // s.child is reset next step
    if (child < 0 || len >= p.max_path) break;
    if (tid == 0) acc[len] = child;
    ++len;
    node = child;
  }
  for (int j = len + tid; j < p.max_path; j += threads) acc[j] = -1;
  if (tid == 0) {
    p.accept_len[b] = len;
    p.bonus[b] = choice;
  }
}

// grid (column blocks, B, layers); Vec = words per access (4: 16-byte loads and stores).
template <int Vec>
__global__ void __launch_bounds__(kCompactThreads) cache_compact_kernel(const CacheCompactParams p) {
  const int b = static_cast<int>(blockIdx.y);
  const int len = p.accept_len[b];
  if (len <= 1) return;  // only the root (already in place) or a skipped request
  const int col = (static_cast<int>(blockIdx.x) * kCompactThreads + static_cast<int>(threadIdx.x)) * Vec;
  if (col >= p.row_words) return;
  const int64_t past = p.past_len[b];
  uint32_t* base = p.cache + static_cast<int64_t>(blockIdx.z) * p.layer_stride + static_cast<int64_t>(b) * p.batch_stride;
  const int32_t* acc = p.accepted + static_cast<int64_t>(b) * p.max_path;
  for (int j = 1; j < len; ++j) {  // increasing j: a later row's source is read before it is overwritten
    const int a = acc[j];
    if (a == j) continue;
    const uint32_t* src = base + (past + a) * p.row_stride + col;
    uint32_t* dst = base + (past + j) * p.row_stride + col;
    if constexpr (Vec == 4) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      *dst = *src;
    }
  }
}

}  // namespace kdtree::kern
