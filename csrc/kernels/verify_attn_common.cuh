// Device code shared by the verify_attn kernels (bf16 tensor-core and f32): the work of one
// CTA (which request, query rows and keys), the tile schedule over the prefix and the masked
// tree tail, the partial-result layout, and the log-sum-exp merge kernel.
#pragma once

#include <cstdint>

#include "block_scan.cuh"
#include "device_compat.cuh"
#include "verify_attn.cuh"

namespace kdtree::kern {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kTailTileWords = 2;  // the tail is cut in 64-key tiles: two vis words each
constexpr int kMaxTailTiles = (kVerifyMaxTreeLen + 63) / 64;  // 17: fits one 32-bit mask
static_assert(kMaxTailTiles <= 32, "active tail tiles are kept in one 32-bit mask");

// Everything a verify kernel needs, flattened once by the launcher.
struct VerifyKernelParams {
  VerifyAttnParams p;   // the caller's arguments
  int rows;             // M = T * H query rows per request; row m = (token m / H, head m % H)
  int m_tiles;          // CTAs along the rows
  int splits;           // CTAs along the keys; split splits-1 also does the tree tail
  int split_len;        // prefix keys per split
  float scale_log2;     // scale * log2(e): scores in the base-2 domain
  float* part_o;        // [B, splits, M, 512] normalised partial outputs (splits > 1)
  float* part_lse;      // [B, splits, M] partial lse, base 2 (-inf: no visible key)
};

// The kernels' parameters for a plan (host side: the launcher and the CPU emulator share
// it). The workspace, 256-byte aligned, holds the partial outputs [B, splits, M, 512] and,
// at the next 256-byte boundary, the partial lse [B, splits, M]; none when splits == 1.
inline VerifyKernelParams make_kernel_params(const VerifyAttnParams& p, const VerifyAttnPlan& plan,
                                             void* workspace) {
  VerifyKernelParams k;
  k.p = p;
  k.rows = p.tree_len * p.heads;
  k.m_tiles = plan.m_tiles;
  k.splits = plan.splits;
  k.split_len = plan.split_len;
  k.scale_log2 = p.scale * kLog2e;
  const size_t parts = static_cast<size_t>(p.batch) * plan.splits * k.rows;
  const bool partials = plan.workspace_bytes > 0;
  k.part_o = partials ? static_cast<float*>(workspace) : nullptr;
  k.part_lse = partials ? reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                                   (parts * kVerifyLatentDim * sizeof(float) + 255) / 256 * 256)
                        : nullptr;
  return k;
}

// The keys one CTA covers: prefix [key_begin, key_end) and, for the last split, the tree.
struct SplitWork {
  int b, split, row0;
  int prefix;               // this request's prefix length
  int key_begin, key_end;   // prefix keys of this split
  bool tail;                // this split also processes the tree's own keys
};

KD_DEVICE SplitWork split_work(const VerifyKernelParams& k, int tile_rows) {
  SplitWork w;
  w.row0 = static_cast<int>(blockIdx.x) * tile_rows;
  w.split = static_cast<int>(blockIdx.y);
  w.b = static_cast<int>(blockIdx.z);
  w.prefix = k.p.prefix_len ? k.p.prefix_len[w.b] : k.p.max_prefix;
  w.prefix = w.prefix < 0 ? 0 : (w.prefix > k.p.max_prefix ? k.p.max_prefix : w.prefix);
  w.key_begin = w.split * k.split_len;
  w.key_end = w.key_begin + k.split_len;
  if (w.key_end > w.prefix) w.key_end = w.prefix;
  if (w.key_begin > w.key_end) w.key_begin = w.key_end;
  w.tail = w.split == k.splits - 1;
  return w;
}

// Bit mask of the 64-key tree tiles that some row of [row0, row0 + tile_rows) can see.
// Threads 0..tile_rows-1 each look at one row; all threads call (contains a barrier).
KD_DEVICE uint32_t active_tail_tiles(const VerifyKernelParams& k, const SplitWork& w, int tile_rows,
                                     uint32_t* smem_mask) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) *smem_mask = 0;
  __syncthreads();
  const int T = k.p.tree_len, H = k.p.heads;
  if (tid < tile_rows && w.row0 + tid < k.rows) {
    const int t = (w.row0 + tid) / H;
    const uint32_t* row = k.p.vis + (static_cast<int64_t>(w.b) * T + t) * k.p.vis_words;
    uint32_t mine = 0;
    const int tiles = (T + 63) / 64;
    for (int i = 0; i < tiles; ++i) {
      const uint32_t lo = row[2 * i];
      const uint32_t hi = 2 * i + 1 < k.p.vis_words ? row[2 * i + 1] : 0u;
      if (lo | hi) mine |= 1u << i;
    }
    atomicOr(smem_mask, mine);
  }
  __syncthreads();
  return *smem_mask;
}

// The key tile at position `index` of a CTA's schedule: its prefix tiles, then its active
// tree tiles. Prefix tiles have `key0` in cache rows; tail tiles have `tail_tile` >= 0.
struct KeyTile {
  int key0;       // first cache row of the tile
  int valid;      // keys of the tile that exist (beyond: masked, zero-filled)
  int tail_tile;  // -1 for a prefix tile, else the 64-key tree tile index
};

KD_DEVICE KeyTile key_tile_at(const SplitWork& w, int prefix_tiles, uint32_t tail_mask, int index, int tile_keys,
                              int tree_len) {
  KeyTile t;
  if (index < prefix_tiles) {
    t.key0 = w.key_begin + index * tile_keys;
    t.valid = min(tile_keys, w.key_end - t.key0);
    t.tail_tile = -1;
    return t;
  }
  // the (index - prefix_tiles)-th set bit of the mask, in tiles of tile_keys keys
  const int tail_per_64 = 64 / tile_keys;  // sub-tiles per 64-key mask tile
  int r = index - prefix_tiles;
  int tile64 = 0;
  uint32_t m = tail_mask;
  while (true) {
    if (m & 1u) {
      if (r < tail_per_64) break;
      r -= tail_per_64;
    }
    m >>= 1;
    ++tile64;
  }
  const int sub = tile64 * tail_per_64 + r;  // tail tile in units of tile_keys
  t.key0 = w.prefix + sub * tile_keys;
  t.valid = min(tile_keys, tree_len - sub * tile_keys);
  t.tail_tile = sub;
  return t;
}

KD_DEVICE int schedule_length(const SplitWork& w, uint32_t tail_mask, int tile_keys) {
  const int prefix_tiles = (w.key_end - w.key_begin + tile_keys - 1) / tile_keys;
  const int tail = w.tail ? __popc(tail_mask) * (64 / tile_keys) : 0;
  return prefix_tiles + tail;
}

// A CTA's schedule: its split, the tree tiles some row of its tile can see, and the tiles it
// walks (its prefix tiles first). Every thread calls it (active_tail_tiles has a barrier).
struct SplitSchedule {
  SplitWork w;
  uint32_t tail_mask;
  int n_tiles, prefix_tiles;
};
KD_DEVICE SplitSchedule split_schedule(const VerifyKernelParams& k, int tile_rows, int tile_keys,
                                       uint32_t* smem_mask) {
  SplitSchedule s;
  s.w = split_work(k, tile_rows);
  s.tail_mask = s.w.tail ? active_tail_tiles(k, s.w, tile_rows, smem_mask) : 0u;
  s.n_tiles = schedule_length(s.w, s.tail_mask, tile_keys);
  s.prefix_tiles = (s.w.key_end - s.w.key_begin + tile_keys - 1) / tile_keys;
  return s;
}

// A split that sees no key (an empty prefix split of a shorter request) writes a partial lse of
// -inf for its rows, so that the merge gives it no weight, and has nothing else to do.
KD_DEVICE void write_empty_split(const VerifyKernelParams& k, const SplitWork& w, int tile_rows) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < tile_rows && w.row0 + tid < k.rows)
    k.part_lse[(static_cast<int64_t>(w.b) * k.splits + w.split) * k.rows + w.row0 + tid] = -INFINITY;
}

// Two adjacent columns of a normalised output row, in the output's type (float32 or bf16,
// rounded to nearest even).
template <class OutT>
KD_DEVICE void store_out_pair(OutT* at, float x0, float x1) {
  if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float2*>(at) = make_float2(x0, x1);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(x0, x1);
  }
}

// A row's log-sum-exp as the caller reads it (natural log) from the kernels' base-2 one.
KD_DEVICE float natural_lse(float lse2) { return lse2 == -INFINITY ? -INFINITY : lse2 / kLog2e; }

// Merge of the splits' partials (normalised O rows and base-2 lse): out = sum_s w_s O_s with
// w_s = 2^(lse_s - max) / sum 2^(lse_s' - max), splits that saw no key (lse -inf, no partial
// row written) left out. Two kernels, one launch (launch_verify_merge):
//   few splits (<= kMergeRowsMaxSplits, verify shapes: many rows): a warp per row, lanes over
//     the 512 columns, the splits' rows loaded kMergeRowBatch at a time;
//   more (decode shapes: few rows, 64-130 splits): a block per (row, 128 columns), its
//     kMergeWarps warps over every kMergeWarps-th split, lanes 4 columns each.
// Neither waits on one load before issuing the next: the lse values a warp needs are loaded
// together, the weights travel to the lanes by shuffles, and the partial rows are loaded
// kMergeBatch (kMergeRowBatch) splits at a time. The first merge (a block per (row, 128
// columns), 4 warps over the splits) walked them one dependent lse read, branch and partial
// read at a time; on the H200 whole launches went from 475.5 to 465.9 us at H=64 n=64 32k (the
// row kernel: 9.5 us, ncu), 38.3 to 36.1 at H=64 n=1 32k and 38.1 to 31.7 at H=8 n=1 32k.
constexpr int kMergeWarps = 8;
constexpr int kMergeThreads = kMergeWarps * kWarpSize;
constexpr int kMergeColBlocks = kVerifyLatentDim / (4 * kWarpSize);  // blocks of 128 columns
// partial rows a warp of the split kernel has in flight: 8 x 512 bytes (16 measured slower on
// the H200: H=64 n=1 32k's merge 11.3 against 9.0 us, H=8's 6.7 against 6.1, ncu)
constexpr int kMergeBatch = 8;
// lse values a lane holds in registers (32 x this many splits per pass; more take more passes)
constexpr int kMergeLseRegs = 8;
// the row kernel: a warp per row, each lane 4 float4 (16 columns) of every split's row, 8
// splits at a time (128 registers of loads); up to two such batches (beyond, the split kernel's
// warps over the splits make a shorter chain of loads)
constexpr int kMergeRowBatch = 8;
constexpr int kMergeRowsMaxSplits = 2 * kMergeRowBatch;
constexpr int kMergeRowWarps = 4;
constexpr int kMergeRowVecs = kVerifyLatentDim / (4 * kWarpSize);
static_assert(kMergeRowsMaxSplits <= kWarpSize, "the row kernel: lane s holds split s's lse");

// Largest lse of row m (over all splits, -inf if none saw a key) and the sum of 2^(lse - top)
// over the splits that saw one, for every lane of the warp: lanes across the splits, up to
// 32 x kMergeLseRegs lse values loaded before any is used.
KD_DEVICE void merge_lse_stats(const float* lse, int S, int rows, float* top_out, float* total_out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  float top = -INFINITY, total = 0.0f;
  for (int s0 = 0; s0 < S; s0 += kWarpSize * kMergeLseRegs) {
    float l[kMergeLseRegs];
#pragma unroll
    for (int i = 0; i < kMergeLseRegs; ++i) {
      const int s = s0 + i * kWarpSize + lane;
      l[i] = s < S ? lse[static_cast<int64_t>(s) * rows] : -INFINITY;
    }
    float chunk_top = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMergeLseRegs; ++i) chunk_top = fmaxf(chunk_top, l[i]);
    chunk_top = warp_max(chunk_top);
    if (chunk_top == -INFINITY) continue;
    if (chunk_top > top) {  // warp-uniform: rescale what the earlier passes summed
      total = top == -INFINITY ? 0.0f : total * exp2f(top - chunk_top);
      top = chunk_top;
    }
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < kMergeLseRegs; ++i)
      if (l[i] != -INFINITY) part += exp2f(l[i] - top);
    total += warp_sum(part);
  }
  *top_out = top;
  *total_out = total;
}

// The merged row's lse as the caller reads it (natural log), from merge_lse_stats' values (total
// > 0: some split saw a key, so top is finite).
KD_DEVICE float merged_lse(float top, float total) { return total > 0.0f ? (top + log2f(total)) / kLog2e : -INFINITY; }

template <class OutT>
KD_DEVICE void store_out4(OutT* at, float4 v) {
  store_out_pair(at, v.x, v.y);
  store_out_pair(at + 2, v.z, v.w);
}

// The split kernel (see above): block (row m, 128-column block, request b).
template <class OutT>
__global__ void __launch_bounds__(kMergeThreads) verify_merge_kernel(const VerifyKernelParams k) {
  __shared__ float4 warp_acc[kMergeWarps - 1][kWarpSize];
  const int m = static_cast<int>(blockIdx.x), b = static_cast<int>(blockIdx.z);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int S = k.splits;
  const int64_t stride = static_cast<int64_t>(k.rows) * kVerifyLatentDim;  // between splits
  const float* lse = k.part_lse + static_cast<int64_t>(b) * S * k.rows + m;
  float top, total;
  merge_lse_stats(lse, S, k.rows, &top, &total);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int col = (static_cast<int>(blockIdx.y) * kWarpSize + lane) * 4;
  const float* o = k.part_o + static_cast<int64_t>(b) * S * stride + static_cast<int64_t>(m) * kVerifyLatentDim + col;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // this warp's splits warp, warp + kMergeWarps, ... in groups of 32: lane j holds the j-th
  // one's weight (merge_lse_stats read the same lines just before), or -1 for one with no key
  for (int s0 = warp; s0 < S; s0 += kMergeWarps * kWarpSize) {
    const int mine = s0 + kMergeWarps * lane;
    float e = -1.0f;
    if (mine < S) {
      const float l = lse[static_cast<int64_t>(mine) * k.rows];
      if (l != -INFINITY) e = exp2f(l - top) * inv;
    }
    const int in_group = min(kWarpSize, ceil_div(S - s0, kMergeWarps));
    for (int j0 = 0; j0 < in_group; j0 += kMergeBatch) {
      float w[kMergeBatch];
      float4 v[kMergeBatch];
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        w[u] = __shfl_sync(kFullMask, e, j0 + u);
        if (j0 + u >= in_group) w[u] = -1.0f;
        v[u] = w[u] >= 0.0f ? *reinterpret_cast<const float4*>(o + (s0 + kMergeWarps * (j0 + u)) * stride)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        if (w[u] < 0.0f) continue;
        acc.x += w[u] * v[u].x;
        acc.y += w[u] * v[u].y;
        acc.z += w[u] * v[u].z;
        acc.w += w[u] * v[u].w;
      }
    }
  }
  if (warp > 0) warp_acc[warp - 1][lane] = acc;
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int i = 0; i < kMergeWarps - 1; ++i) {
    const float4 v = warp_acc[i][lane];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  store_out4(static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(b) * k.rows + m) * kVerifyLatentDim + col, acc);
  if (lane == 0 && blockIdx.y == 0 && k.p.lse) k.p.lse[static_cast<int64_t>(b) * k.rows + m] = merged_lse(top, total);
}

// The row kernel (see above): warp `warp` of block (x, 1, b) merges row kMergeRowWarps x + warp,
// kMergeRowBatch splits' rows loaded at a time.
template <class OutT>
__global__ void __launch_bounds__(kMergeRowWarps* kWarpSize) verify_merge_rows_kernel(const VerifyKernelParams k) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int m = static_cast<int>(blockIdx.x) * kMergeRowWarps + warp, b = static_cast<int>(blockIdx.z);
  if (m >= k.rows) return;  // warp-uniform
  const int S = k.splits;
  const int64_t stride = static_cast<int64_t>(k.rows) * kVerifyLatentDim;
  const float* lse = k.part_lse + static_cast<int64_t>(b) * S * k.rows + m;
  const float l = lane < S ? lse[static_cast<int64_t>(lane) * k.rows] : -INFINITY;  // lane s: split s
  const float top = warp_max(l);
  const float e = l != -INFINITY ? exp2f(l - top) : 0.0f;
  const float total = warp_sum(e);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const float wl = l != -INFINITY ? e * inv : -1.0f;  // lane s: split s's weight, -1 if it saw no key
  const float* o = k.part_o + static_cast<int64_t>(b) * S * stride + static_cast<int64_t>(m) * kVerifyLatentDim + 4 * lane;
  float4 acc[kMergeRowVecs];
#pragma unroll
  for (int c = 0; c < kMergeRowVecs; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < S; s0 += kMergeRowBatch) {
    float4 v[kMergeRowBatch][kMergeRowVecs];
    float w[kMergeRowBatch];
#pragma unroll
    for (int u = 0; u < kMergeRowBatch; ++u) {
      w[u] = __shfl_sync(kFullMask, wl, s0 + u);
      if (s0 + u >= S) w[u] = -1.0f;
#pragma unroll
      for (int c = 0; c < kMergeRowVecs; ++c)
        v[u][c] = w[u] >= 0.0f ? *reinterpret_cast<const float4*>(o + (s0 + u) * stride + c * 4 * kWarpSize)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kMergeRowBatch; ++u) {
      if (w[u] < 0.0f) continue;
#pragma unroll
      for (int c = 0; c < kMergeRowVecs; ++c) {
        acc[c].x += w[u] * v[u][c].x;
        acc[c].y += w[u] * v[u][c].y;
        acc[c].z += w[u] * v[u][c].z;
        acc[c].w += w[u] * v[u][c].w;
      }
    }
  }
  OutT* out = static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(b) * k.rows + m) * kVerifyLatentDim + 4 * lane;
#pragma unroll
  for (int c = 0; c < kMergeRowVecs; ++c) store_out4(out + c * 4 * kWarpSize, acc[c]);
  if (lane == 0 && k.p.lse) k.p.lse[static_cast<int64_t>(b) * k.rows + m] = merged_lse(top, total);
}

// The merge of a split launch (k.splits > 1), on the stream after the attention kernel (the
// caller reads the launch's error with launch_status).
template <class OutT>
inline void launch_verify_merge(const VerifyKernelParams& k, cudaStream_t stream) {
  if (k.splits <= kMergeRowsMaxSplits) {
    const dim3 grid(static_cast<unsigned>(ceil_div(k.rows, kMergeRowWarps)), 1, static_cast<unsigned>(k.p.batch));
    KD_LAUNCH(verify_merge_rows_kernel<OutT>, grid, kMergeRowWarps * kWarpSize, 0, stream, k);
  } else {
    const dim3 grid(static_cast<unsigned>(k.rows), kMergeColBlocks, static_cast<unsigned>(k.p.batch));
    KD_LAUNCH(verify_merge_kernel<OutT>, grid, kMergeThreads, 0, stream, k);
  }
}

}  // namespace kdtree::kern
