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
  int split_group;      // splits reduced on chip together (a cluster along the keys: 1 or 2)
  int parts;            // partials a row: splits / split_group (1: the output is written directly)
  float scale_log2;     // scale * log2(e): scores in the base-2 domain
  float* part_o;        // [B, parts, M, 512] normalised partial outputs (parts > 1)
  float* part_lse;      // [B, parts, M] partial lse, base 2 (-inf: no visible key)
};

// The kernels' parameters for a plan (host side: the launcher and the CPU emulator share
// it). The workspace, 256-byte aligned, holds the partial outputs [B, parts, M, 512] and,
// at the next 256-byte boundary, the partial lse [B, parts, M]; none when parts == 1.
inline VerifyKernelParams make_kernel_params(const VerifyAttnParams& p, const VerifyAttnPlan& plan,
                                             void* workspace) {
  VerifyKernelParams k;
  k.p = p;
  k.rows = p.tree_len * p.heads;
  k.m_tiles = plan.m_tiles;
  k.splits = plan.splits;
  k.split_len = plan.split_len;
  k.split_group = plan.split_group;
  k.parts = verify_plan_parts(plan);
  k.scale_log2 = p.scale * kLog2e;
  const size_t parts = static_cast<size_t>(p.batch) * k.parts * k.rows;
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

// The partial row index of row 0 of request b's partial `slot` ([B, parts, M]).
KD_DEVICE int64_t part_row0(const VerifyKernelParams& k, int b, int slot) {
  return (static_cast<int64_t>(b) * k.parts + slot) * k.rows;
}

// A split that sees no key (an empty prefix split of a shorter request) writes a partial lse of
// -inf for its rows, so that the merge gives it no weight, and zero rows, which the merge loads
// before it knows the weights (never uninitialised memory, never a NaN times 0).
KD_DEVICE void write_empty_split(const VerifyKernelParams& k, const SplitWork& w, int tile_rows) {
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t base = part_row0(k, w.b, w.split / k.split_group) + w.row0;
  const int rows = min(tile_rows, k.rows - w.row0);
  if (tid < rows) k.part_lse[base + tid] = -INFINITY;
  float4* o = reinterpret_cast<float4*>(k.part_o + base * kVerifyLatentDim);
  for (int i = tid; i < rows * (kVerifyLatentDim / 4); i += static_cast<int>(blockDim.x)) o[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
// w_s = 2^(lse_s - max) / sum 2^(lse_s' - max); a split that saw no key has lse -inf (weight
// 0) and zero rows (write_empty_split), so every partial row can be loaded before any lse is
// known. Two kernels, one launch (launch_verify_merge):
//   few splits (<= kMergeRowsMaxSplits, verify shapes: many rows): a warp per row, lanes over
//     the 512 columns, kMergeRowBatch splits' rows at a time;
//   more (decode shapes: few rows, 9-130 splits): a block per (row, 128 columns), its
//     kMergeWarps warps over every kMergeWarps-th split, lanes 4 columns each.
// One round trip of loads per batch: each warp loads its splits' partial rows and lse values
// together and keeps its own running maximum (the online softmax's rescaling), and the warps
// meet once, in shared memory, at the end, instead of reading every lse first (the maximum
// over all splits) and then the partials behind the weights: three dependent round trips,
// which at 65 splits were a fifth of H=64 n=1 32k's launch (docs/kernels/verify_attn.md).
constexpr int kMergeWarps = 8;
constexpr int kMergeThreads = kMergeWarps * kWarpSize;
constexpr int kMergeColBlocks = kVerifyLatentDim / (4 * kWarpSize);  // blocks of 128 columns
// partial rows (float4 a lane) a warp of the split kernel loads in one round trip: 8 keeps it
// at <= 64 registers (all 512 blocks of H=64 n=1 in one wave of four a SM; 12 took 104
// registers and two waves, and was slower) ...
constexpr int kMergeBatch = 8;
// the register budget that batch keeps to: four blocks a SM (64 registers) on sm_90; two on
// sm_120, where ptxas spills its sum at four (96 bytes) and three (32) and takes 112 registers
// at two (not yet timed there; `kdtree build --check-resources` fails on a spill)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kMergeNarrowBlocksPerSm = 2;
#else
constexpr int kMergeNarrowBlocksPerSm = 4;
#endif
// ... and where its blocks fit one wave of one a SM anyway (few rows: H=8 n=1, 129 splits), 24:
// every split of a warp in one round trip (H=8 n=1 32k: 31.2 us with 12 a batch, 32.7 with 8)
constexpr int kMergeWideBatch = 24;
// the row kernel: a warp per row, each lane 4 float4 (16 columns) of every split's row, 8
// splits at a time (128 registers of loads); up to two such batches (beyond, the split kernel's
// warps over the splits make a shorter chain of loads)
constexpr int kMergeRowBatch = 8;
constexpr int kMergeRowsMaxSplits = 2 * kMergeRowBatch;
constexpr int kMergeRowWarps = 4;
constexpr int kMergeRowVecs = kVerifyLatentDim / (4 * kWarpSize);

// A running merge: sum of 2^(lse_s - top) O_s and of 2^(lse_s - top) over the splits added so
// far, top their largest lse (-inf: none saw a key yet).
template <int kVecs>
struct MergeSum {
  float top = -INFINITY, total = 0.0f;
  float4 acc[kVecs];
  KD_DEVICE MergeSum() {
#pragma unroll
    for (int c = 0; c < kVecs; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // take a batch's lse values (-inf: no weight) and rows (lse uniform across the warp)
  template <int kBatch>
  KD_DEVICE void add(const float (&l)[kBatch], const float4 (&v)[kBatch][kVecs]) {
    float batch_top = top;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) batch_top = fmaxf(batch_top, l[u]);
    if (batch_top == -INFINITY) return;
    rescale(batch_top);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (l[u] == -INFINITY) continue;  // no weight, and its rows never touched (zeros here, NaN in the test)
      const float e = exp2f(l[u] - top);
      total += e;
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        acc[c].x += e * v[u][c].x;
        acc[c].y += e * v[u][c].y;
        acc[c].z += e * v[u][c].z;
        acc[c].w += e * v[u][c].w;
      }
    }
  }
  // take another running merge (its top t, total and acc): the warps' sums, met in shared memory
  KD_DEVICE void add_sum(float t, float t_total, const float4 (&a)[kVecs]) {
    if (t == -INFINITY) return;
    rescale(fmaxf(top, t));
    const float f = exp2f(t - top);
    total += f * t_total;
#pragma unroll
    for (int c = 0; c < kVecs; ++c)
      acc[c] = make_float4(acc[c].x + f * a[c].x, acc[c].y + f * a[c].y, acc[c].z + f * a[c].z, acc[c].w + f * a[c].w);
  }
  // the merged columns acc[c] / total (0 where no split saw a key)
  KD_DEVICE float4 normalised(int c) const {
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    return make_float4(acc[c].x * inv, acc[c].y * inv, acc[c].z * inv, acc[c].w * inv);
  }
  // move to the reference maximum t >= top (finite)
  KD_DEVICE void rescale(float t) {
    if (t == top) return;
    const float f = top == -INFINITY ? 0.0f : exp2f(top - t);
    total *= f;
#pragma unroll
    for (int c = 0; c < kVecs; ++c) acc[c] = make_float4(acc[c].x * f, acc[c].y * f, acc[c].z * f, acc[c].w * f);
    top = t;
  }
};

// The merged row's lse as the caller reads it (natural log; total > 0: some split saw a key).
KD_DEVICE float merged_lse(float top, float total) { return total > 0.0f ? (top + log2f(total)) / kLog2e : -INFINITY; }

template <class OutT>
KD_DEVICE void store_out4(OutT* at, float4 v) {
  store_out_pair(at, v.x, v.y);
  store_out_pair(at + 2, v.z, v.w);
}

// The split kernel (see above): block (row m, 128-column block, request b); kBatch: kMergeBatch
// or kMergeWideBatch.
template <class OutT, int kBatch>
__global__ void __launch_bounds__(kMergeThreads, kBatch <= kMergeBatch ? kMergeNarrowBlocksPerSm : 1)
    verify_merge_kernel(const VerifyKernelParams k) {
  __shared__ float4 warp_acc[kMergeWarps][kWarpSize];
  __shared__ float warp_top[kMergeWarps], warp_total[kMergeWarps];
  const int m = static_cast<int>(blockIdx.x), b = static_cast<int>(blockIdx.z);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int S = k.parts;
  const int64_t stride = static_cast<int64_t>(k.rows) * kVerifyLatentDim;  // between splits
  const float* lse = k.part_lse + static_cast<int64_t>(b) * S * k.rows + m;
  const int col = (static_cast<int>(blockIdx.y) * kWarpSize + lane) * 4;
  const float* o = k.part_o + static_cast<int64_t>(b) * S * stride + static_cast<int64_t>(m) * kVerifyLatentDim + col;
  grid_dependency_wait();  // a programmatic dependent launch: the partials are complete past here
  MergeSum<1> sum;
  // this warp's splits warp, warp + kMergeWarps, ..., kBatch of them a round trip
  for (int s0 = warp; s0 < S; s0 += kMergeWarps * kBatch) {
    float l[kBatch];
    float4 v[kBatch][1];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int s = s0 + kMergeWarps * u;
      l[u] = s < S ? lse[static_cast<int64_t>(s) * k.rows] : -INFINITY;
      v[u][0] = s < S ? *reinterpret_cast<const float4*>(o + s * stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    sum.add(l, v);
  }
  warp_top[warp] = sum.top;  // every lane holds the same top and total
  warp_total[warp] = sum.total;
  warp_acc[warp][lane] = sum.acc[0];
  __syncthreads();
  if (warp > 0) return;
  MergeSum<1> all;  // the warps' sums at the largest of their maxima (taken first: one rescale)
  float top = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMergeWarps; ++i) top = fmaxf(top, warp_top[i]);
  if (top != -INFINITY) all.rescale(top);
#pragma unroll
  for (int i = 0; i < kMergeWarps; ++i) {
    const float4 a[1] = {warp_acc[i][lane]};
    all.add_sum(warp_top[i], warp_total[i], a);
  }
  store_out4(static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(b) * k.rows + m) * kVerifyLatentDim + col, all.normalised(0));
  if (lane == 0 && blockIdx.y == 0 && k.p.lse) k.p.lse[static_cast<int64_t>(b) * k.rows + m] = merged_lse(all.top, all.total);
}

// The row kernel (see above): warp `warp` of block (x, 1, b) merges row kMergeRowWarps x + warp,
// kMergeRowBatch splits' rows loaded at a time.
template <class OutT>
__global__ void __launch_bounds__(kMergeRowWarps* kWarpSize) verify_merge_rows_kernel(const VerifyKernelParams k) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int m = static_cast<int>(blockIdx.x) * kMergeRowWarps + warp, b = static_cast<int>(blockIdx.z);
  if (m >= k.rows) return;  // warp-uniform
  grid_dependency_wait();   // a programmatic dependent launch: the partials are complete past here
  const int S = k.parts;
  const int64_t stride = static_cast<int64_t>(k.rows) * kVerifyLatentDim;
  const float* lse = k.part_lse + static_cast<int64_t>(b) * S * k.rows + m;
  const float* o = k.part_o + static_cast<int64_t>(b) * S * stride + static_cast<int64_t>(m) * kVerifyLatentDim + 4 * lane;
  MergeSum<kMergeRowVecs> sum;
  for (int s0 = 0; s0 < S; s0 += kMergeRowBatch) {
    float l[kMergeRowBatch];
    float4 v[kMergeRowBatch][kMergeRowVecs];
#pragma unroll
    for (int u = 0; u < kMergeRowBatch; ++u) {
      const bool in = s0 + u < S;
      l[u] = in ? lse[static_cast<int64_t>(s0 + u) * k.rows] : -INFINITY;
#pragma unroll
      for (int c = 0; c < kMergeRowVecs; ++c)
        v[u][c] = in ? *reinterpret_cast<const float4*>(o + (s0 + u) * stride + c * 4 * kWarpSize)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    sum.add(l, v);
  }
  OutT* out = static_cast<OutT*>(k.p.out) + (static_cast<int64_t>(b) * k.rows + m) * kVerifyLatentDim + 4 * lane;
#pragma unroll
  for (int c = 0; c < kMergeRowVecs; ++c) store_out4(out + c * 4 * kWarpSize, sum.normalised(c));
  if (lane == 0 && k.p.lse) k.p.lse[static_cast<int64_t>(b) * k.rows + m] = merged_lse(sum.top, sum.total);
}

// Whether the split kernel's blocks (one per row, 128 columns and request) fit one wave of one
// block a SM, so that its wide form (kMergeWideBatch, more registers) costs no second wave.
inline bool verify_merge_wide(int batch, int rows, int splits, int sms) {
  return splits > kMergeRowsMaxSplits && static_cast<int64_t>(batch) * rows * kMergeColBlocks <= sms;
}

// The merge of a split launch (k.parts > 1), on the stream after the attention kernel (the
// caller reads the launch's error with launch_status). overlap: as a programmatic dependent of
// that kernel (VerifyAttnPlan::merge_overlap; the attention kernels let it start at once, and
// the merge's blocks wait for the partials in grid_dependency_wait). wide: the split kernel's
// wide form (VerifyAttnPlan::merge_wide). Returns the launch's error.
template <class OutT>
inline auto launch_verify_merge(const VerifyKernelParams& k, cudaStream_t stream, bool overlap = false, bool wide = false) {
  if (k.parts <= kMergeRowsMaxSplits) {
    const dim3 grid(static_cast<unsigned>(ceil_div(k.rows, kMergeRowWarps)), 1, static_cast<unsigned>(k.p.batch));
    return KD_LAUNCH_OVERLAPPED(overlap, verify_merge_rows_kernel<OutT>, grid, kMergeRowWarps * kWarpSize, 0, stream, k);
  }
  const dim3 grid(static_cast<unsigned>(k.rows), kMergeColBlocks, static_cast<unsigned>(k.p.batch));
  if (wide) return KD_LAUNCH_OVERLAPPED(overlap, (verify_merge_kernel<OutT, kMergeWideBatch>), grid, kMergeThreads, 0, stream, k);
  return KD_LAUNCH_OVERLAPPED(overlap, (verify_merge_kernel<OutT, kMergeBatch>), grid, kMergeThreads, 0, stream, k);
}

}  // namespace kdtree::kern
