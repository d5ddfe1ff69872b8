// The DFlash drafter's attention (python_engine/model/drafter.py::draft): the block's q_len
// queries per head attend, with no mask, to the request's cached context keys/values
// [0, ctx_len) and to the block's own q_len keys/values; grouped-query heads (head h reads
// kv head h / (heads / kv_heads)). Float32 scores and online softmax, output rounded once.
//
// Split-KV (flash-decoding): one CTA serves a row tile of one KV group's query rows (every
// head of the group x every block query, so a K/V tile is read once per tile, not once per
// head) over one chunk of the request's keys; a request whose keys span several chunks
// writes float32 partials (unnormalised o, running max, sum) to the workspace and a merge
// kernel combines them exactly (log-sum-exp). The plan fixes the most splits from the
// largest context the caller allows (max_ctx) and the SM count, so that one launch shape
// serves every context (CUDA graphs); each request uses as many of them as its own keys
// fill (drafter_active_splits), and a request that needs one writes its output directly.
// Host API; kernels in drafter_attn.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "device_compat.cuh"
#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

constexpr int kDrafterMaxBlock = 64;     // queries per request (the drafter's block size)
constexpr int kDrafterMaxHeadDim = 256;
// Keys per inner tile: one lane per key in the softmax update.
constexpr int kDrafterKeyTile = 32;
// The fewest keys a split takes: below this a split's partial (a float32 row of head_dim + 2
// per query row, written then read by the merge) costs about as much as its keys.
constexpr int kDrafterMinSplitKeys = 256;
// CTAs a launch aims for per SM: two 48 KB CTAs fit an SM on every target (sm_120: ~100 KB).
constexpr int kDrafterCtasPerSm = 2;
// The merge's per-split weights live in shared memory; no plan asks for more splits.
constexpr int kDrafterMaxSplits = 1024;
// Shared memory a CTA's row tile is sized to: the 48 KB every launch gets without opting
// in, two CTAs an SM on sm_120. A head_dim whose key/value tile alone exceeds it takes one row.
constexpr int kDrafterSmemBudget = 48 * 1024;
constexpr size_t kDrafterWorkspaceAlign = 256;  // each workspace array starts 256-byte aligned

struct DrafterAttnParams {
  ModelDType dtype = ModelDType::kF32;
  int batch = 0, q_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  const void* q = nullptr;              // [batch, q_len, heads, head_dim], tokens q_stride apart
  int64_t q_stride = 0;                 // elements between tokens (0: heads * head_dim)
  const void* ctx_k = nullptr;          // request b, key j, kv head g at
  const void* ctx_v = nullptr;          //   ctx + b * ctx_batch_stride + j * kv_heads * head_dim + g * head_dim
  int64_t ctx_batch_stride = 0;
  const int32_t* ctx_len = nullptr;     // [batch] device: context keys of each request
  // The longest context the plan splits for (the cache capacity). A longer ctx_len is still
  // attended exactly, in longer chunks; it only sizes the plan and the workspace.
  int max_ctx = 0;
  const void* blk_k = nullptr;          // [batch, q_len, kv_heads, head_dim], tokens blk_stride apart
  const void* blk_v = nullptr;
  int64_t blk_stride = 0;               // elements between tokens (0: kv_heads * head_dim)
  float scale = 0.0f;                   // 1 / sqrt(head_dim)
  void* out = nullptr;                  // [batch, q_len, heads, head_dim]
  void* workspace = nullptr;            // the partials: drafter_attn_plan's workspace_bytes, 256-byte aligned
  size_t workspace_bytes = 0;
};

// How drafter_attn divides one launch: a pure function of the sizes and the SM count.
struct DrafterAttnPlan {
  int group_rows = 0;   // query rows of one KV group: (heads / kv_heads) * q_len, row = head * q_len + t
  int tile_rows = 0;    // query rows per CTA
  int row_tiles = 0;    // CTAs along a group's rows
  int splits = 0;       // CTAs along the keys per (request, kv head, row tile): the most a request uses
  size_t smem_bytes = 0;       // dynamic shared memory of the attention kernel
  size_t merge_smem_bytes = 0; // of the merge kernel (0: no merge, splits == 1)
  size_t workspace_bytes = 0;  // partials (0 when splits == 1)
};

// Shared-memory layout of one attention CTA (byte offsets): float32 output accumulator,
// scores and row statistics, then the query tile and one key/value tile in the input dtype.
constexpr size_t kDrafterSmemAlign = 16;  // each shared array 16-byte aligned (vector loads)
struct DrafterSmem {
  size_t o, s, m, l, alpha, q, k, v, total;
  int kpad;  // key row stride (elements): one 32-bit word of padding against bank conflicts
};
KD_HOST_DEVICE inline DrafterSmem drafter_smem_layout(int tile_rows, int hd, int elem_bytes) {
  DrafterSmem L;
  L.kpad = hd + 4 / elem_bytes;
  const size_t rows = static_cast<size_t>(tile_rows);
  L.o = 0;
  L.s = kern::round_up<size_t>(L.o + rows * hd * sizeof(float), kDrafterSmemAlign);
  L.m = kern::round_up<size_t>(L.s + rows * kDrafterKeyTile * sizeof(float), kDrafterSmemAlign);
  L.l = L.m + rows * sizeof(float);
  L.alpha = L.l + rows * sizeof(float);
  L.q = kern::round_up<size_t>(L.alpha + rows * sizeof(float), kDrafterSmemAlign);
  L.k = kern::round_up<size_t>(L.q + rows * hd * elem_bytes, kDrafterSmemAlign);
  L.v = kern::round_up<size_t>(L.k + static_cast<size_t>(kDrafterKeyTile) * L.kpad * elem_bytes, kDrafterSmemAlign);
  L.total = kern::round_up<size_t>(L.v + static_cast<size_t>(kDrafterKeyTile) * hd * elem_bytes, kDrafterSmemAlign);
  return L;
}

// The splits request keys `total` (context + block) takes under a plan of `splits`, and the
// keys of each (a multiple of the key tile; the last split takes the rest). Every split in
// [0, active) has at least one key.
struct DrafterSplitRange {
  int active, chunk;
};
KD_HOST_DEVICE inline DrafterSplitRange drafter_active_splits(int total, int splits) {
  int n = kern::ceil_div(total, kDrafterMinSplitKeys);
  n = n < splits ? n : splits;
  n = n < 1 ? 1 : n;
  DrafterSplitRange r;
  r.chunk = kern::round_up(kern::ceil_div(total, n), kDrafterKeyTile);
  r.active = kern::ceil_div(total, r.chunk);
  return r;
}

// Partials of a plan, in the workspace: o [batch, kv_heads, splits, group_rows, head_dim]
// float32, then m and l [batch, kv_heads, splits, group_rows] float32.
struct DrafterWorkspaceLayout {
  size_t o, m, l, total;
};
KD_HOST_DEVICE inline DrafterWorkspaceLayout drafter_workspace_layout(int batch, int kv_heads, int splits,
                                                                      int group_rows, int hd) {
  const size_t rows = static_cast<size_t>(batch) * kv_heads * splits * group_rows;
  DrafterWorkspaceLayout w;
  w.o = 0;
  w.m = kern::round_up<size_t>(rows * hd * sizeof(float), kDrafterWorkspaceAlign);
  w.l = kern::round_up<size_t>(w.m + rows * sizeof(float), kDrafterWorkspaceAlign);
  w.total = kern::round_up<size_t>(w.l + rows * sizeof(float), kDrafterWorkspaceAlign);
  return w;
}

// The plan for these sizes on a device of `sms` SMs (no device needed; the emulated tests and
// the engine's workspace bound call it).
DrafterAttnPlan make_drafter_attn_plan(const DrafterAttnParams& p, int sms);
// The plan on the current device (KDTREE_DEVICE_PROFILE applies); errors if it cannot launch there.
KernelResult drafter_attn_plan(const DrafterAttnParams& p, DrafterAttnPlan* plan);
KernelResult drafter_attn(const DrafterAttnParams& p, cudaStream_t stream);

// The sizes alone (what a plan needs; no pointers).
inline KernelResult check_drafter_attn_sizes(const DrafterAttnParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch < 0) return KernelResult::invalid("drafter_attn: batch must be >= 0");
  if (p.batch > 65535) return KernelResult::over_limit("drafter_attn: batch over 65535 (grid.y)");
  if (p.q_len < 1 || p.q_len > kDrafterMaxBlock)
    return KernelResult::over_limit("drafter_attn: block of " + s(p.q_len) + " queries outside 1.." + s(kDrafterMaxBlock));
  if (p.head_dim < 1 || p.head_dim > kDrafterMaxHeadDim)
    return KernelResult::over_limit("drafter_attn: head_dim " + s(p.head_dim) + " outside 1.." + s(kDrafterMaxHeadDim));
  if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads)
    return KernelResult::invalid("drafter_attn: heads must be a multiple of kv_heads");
  if (p.max_ctx < 0) return KernelResult::invalid("drafter_attn: max_ctx must be >= 0");
  if (!(p.scale > 0.0f)) return KernelResult::invalid("drafter_attn: scale must be positive");
  return KernelResult::success();
}

inline KernelResult check_drafter_attn_params(const DrafterAttnParams& p) {
  if (KernelResult r = check_drafter_attn_sizes(p); !r.ok()) return r;
  if (p.batch > 0 && (!p.q || !p.ctx_k || !p.ctx_v || !p.ctx_len || !p.blk_k || !p.blk_v || !p.out))
    return KernelResult::invalid("drafter_attn: every pointer must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
