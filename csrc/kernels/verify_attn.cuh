// verify_attn: the MLA attention of DDTree's verify pass, absorbed form
// (docs/kernels/verify_attn.md). Per request, the T = 1 + n tree tokens x H heads query the latent
// cache: the prefix rows (no mask) and the tree's own T rows (ancestor mask `vis`).
//
//   score = scale * (q_lat . c + q_pe . k_pe)      c = cache row [0, 512), k_pe = [512, 576)
//   out   = softmax(score) @ c                      lse = log sum exp(score) (natural log)
//
// The key range is split across CTAs (split-KV) so the prefix is bounded by nothing but
// memory; the last split also takes the masked tree tail; partial results are merged by
// log-sum-exp in a second kernel. Two numeric paths:
//   bf16: bf16 inputs, tensor cores (mma.sync m16n8k16, or wgmma on sm_90a), float32
//         accumulation and softmax;
//   f32:  float32 inputs and arithmetic throughout (CUDA cores): the exactness reference.
// Oracle: python_engine/verify_attn_ref.py (float64).
//
// This header is the host API (no device code).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <climits>
#include <string>

#include "kernel_status.h"
#include "tree_build.cuh"

namespace kdtree {

constexpr int kVerifyLatentDim = 512;  // kv_lora_rank: q_lat width and value width
constexpr int kVerifyRopeDim = 64;     // qk_rope_head_dim
constexpr int kVerifyQKDim = kVerifyLatentDim + kVerifyRopeDim;  // 576: one latent cache row
constexpr int kVerifyMaxTreeLen = kTreeMaxNodes + 1;             // T = 1 + n
constexpr int kVerifyMaxHeads = 256;                              // query heads per request
constexpr int64_t kVerifyMaxKeys = int64_t{1} << 26;             // prefix + T per request

enum class AttnDType { kF32, kBF16 };

struct VerifyAttnParams {
  AttnDType dtype = AttnDType::kBF16;  // of q_lat, q_pe, kv and out
  int batch = 0;                  // B requests
  int heads = 0;                  // H query heads (all share the one latent KV head)
  int tree_len = 0;               // T = 1 + n query tokens per request (same T for all; pad)
  int max_prefix = 0;             // host-known bound on prefix_len[b] (sizes the split grid)
  const int32_t* prefix_len = nullptr;  // [B] device: cache rows before the tree; null -> max_prefix
  const void* q_lat = nullptr;    // [B, T, H, 512]
  const void* q_pe = nullptr;     // [B, T, H, 64]
  const void* kv = nullptr;       // request b: rows kv + b * kv_batch_stride, each [576];
                                  //   rows [0, prefix_b) prefix, [prefix_b, prefix_b + T) the tree
  int64_t kv_row_stride = kVerifyQKDim;  // elements between cache rows (>= 576, multiple of 8)
  int64_t kv_batch_stride = 0;    // elements between requests
  const uint32_t* vis = nullptr;  // [B, T, vis_words]: bit i of row t = tree entry i visible to t
  int vis_words = 0;              // >= ceil(T / 32)
  float scale = 0.0f;             // softmax scale (1/sqrt(qk_nope + qk_rope), times mscale^2)
  void* out = nullptr;            // [B, T, H, 512], dtype as the inputs
  float* lse = nullptr;           // [B, T, H] natural-log sum of exp(score), or null
  void* workspace = nullptr;      // split-KV partials; verify_attn_workspace_bytes() says how much
  size_t workspace_bytes = 0;
  // test hooks (leave at their defaults): force a tile configuration (VerifyAttnConfig in
  // verify_attn_plan.h; a baseline only where this build holds it: verify_attn_config_unbuilt)
  // instead of the device's best, or force prefix keys per split
  int force_config = -1;
  int force_split_keys = 0;
};

// The groups of arguments VerifyAttnParams are built from (make_verify_attn_params), so that
// every caller names what it passes and two arrays of one type cannot trade places.

// The queries: T = 1 + n tree tokens x H heads of each of B requests.
struct VerifyQueries {
  AttnDType dtype = AttnDType::kBF16;  // of q_lat, q_pe, the cache rows and out
  int batch = 0;                       // B
  int tree_len = 0;                    // T
  int heads = 0;                       // H
  const void* q_lat = nullptr;         // [B, T, H, 512]
  const void* q_pe = nullptr;          // [B, T, H, 64]
  float scale = 0.0f;                  // softmax scale
};

// The latent cache rows they attend to: request b's at kv + b * batch_stride, its prefix
// first, then the tree's own T rows.
struct VerifyKeys {
  const void* kv = nullptr;
  int64_t row_stride = kVerifyQKDim;    // elements between rows
  int64_t batch_stride = 0;             // elements between requests
  int max_prefix = 0;                   // host-known bound on prefix_len[b]
  const int32_t* prefix_len = nullptr;  // [B] device, or null -> max_prefix
};

// The tree's ancestor mask: bit i of row t = tree entry i visible to t.
struct TreeMask {
  const uint32_t* vis = nullptr;  // [B, T, words]
  int words = 0;                  // >= ceil(T / 32)
};

// Where the results go.
struct VerifyOutputs {
  void* out = nullptr;         // [B, T, H, 512]
  float* lse = nullptr;        // [B, T, H], or null
  void* workspace = nullptr;   // split-KV partials (verify_attn_workspace_bytes), or null
  size_t workspace_bytes = 0;
};

// The one place VerifyAttnParams are built. The test hooks (force_*) keep their defaults.
inline VerifyAttnParams make_verify_attn_params(const VerifyQueries& queries, const VerifyKeys& keys,
                                                const TreeMask& mask, const VerifyOutputs& outputs) {
  VerifyAttnParams p;
  p.dtype = queries.dtype;
  p.batch = queries.batch;
  p.heads = queries.heads;
  p.tree_len = queries.tree_len;
  p.max_prefix = keys.max_prefix;
  p.prefix_len = keys.prefix_len;
  p.q_lat = queries.q_lat;
  p.q_pe = queries.q_pe;
  p.kv = keys.kv;
  p.kv_row_stride = keys.row_stride;
  p.kv_batch_stride = keys.batch_stride;
  p.vis = mask.vis;
  p.vis_words = mask.words;
  p.scale = queries.scale;
  p.out = outputs.out;
  p.lse = outputs.lse;
  p.workspace = outputs.workspace;
  p.workspace_bytes = outputs.workspace_bytes;
  return p;
}

// Parameters for planning alone (verify_attn_plan, the workspace bounds): the sizes of
// `queries` over caches of `capacity` rows a request, with the longest prefix that leaves room
// for the tree. Every pointer leads to one aligned dummy (the plan checks their alignment).
inline VerifyAttnParams make_verify_attn_plan_params(VerifyQueries queries, int capacity) {
  alignas(256) static const int16_t dummy[8] = {};
  queries.q_lat = queries.q_pe = dummy;
  VerifyKeys keys;
  keys.kv = dummy;
  keys.batch_stride = static_cast<int64_t>(capacity) * kVerifyQKDim;
  keys.max_prefix = capacity - queries.tree_len;
  TreeMask mask;
  mask.vis = reinterpret_cast<const uint32_t*>(dummy);
  mask.words = (queries.tree_len + 31) / 32;
  VerifyOutputs outputs;
  outputs.out = const_cast<int16_t*>(dummy);
  return make_verify_attn_params(queries, keys, mask, outputs);
}

// How verify_attn divides one launch (a pure function of the sizes and the device).
struct VerifyAttnPlan {
  int tile_rows = 0;    // query rows (t, h) per CTA
  int tile_keys = 0;    // keys per inner tile
  int m_tiles = 0;      // ceil(T * H / tile_rows)
  int splits = 0;       // CTAs along the key axis per (request, row tile); the last takes the tree
  int split_len = 0;    // prefix keys per split (multiple of tile_keys)
  // Splits reduced on chip in clusters of this many along the key axis before any partial is
  // written (the seesaw pairs, a baseline); the merge sees splits / split_group partials a row.
  int split_group = 1;
  size_t smem_bytes = 0;
  size_t workspace_bytes = 0;  // partials: 0 when splits / split_group == 1
  int config = 0;       // which compiled tile configuration (internal)
  // No prefix up to max_prefix (same batch, heads, tree) gets more splits than split_bound,
  // nor more workspace than workspace_bound_bytes: one workspace of that size serves them all.
  int split_bound = 0;
  size_t workspace_bound_bytes = 0;
  // The merge launches as a programmatic dependent of the attention kernel (sm_90+): its blocks
  // are placed as the attention's CTAs leave instead of after the whole grid has drained.
  bool merge_overlap = false;
  // The merge's split kernel in its wide form (kern::verify_merge_wide: few rows, many splits).
  bool merge_wide = false;
};

// Partials a (request, row) of a plan: the splits, less those reduced on chip together.
inline int verify_plan_parts(const VerifyAttnPlan& pl) { return pl.splits / pl.split_group; }

// The plan for these sizes on the current device (errors if impossible there).
KernelResult verify_attn_plan(const VerifyAttnParams& p, VerifyAttnPlan* plan);
// Why this build of the library cannot launch `config` ("" when it can): a baseline
// (csrc/dev/verify_attn_baselines.h) outside a baselines build, or no such configuration.
std::string verify_attn_config_unbuilt(int config);
// Bytes of workspace verify_attn needs for these sizes on the current device (0 on error).
size_t verify_attn_workspace_bytes(const VerifyAttnParams& p);
// Bytes of workspace that serve every prefix from 0 to p.max_prefix (0 on error): what an
// engine allocates once for a cache capacity (the split count is not monotone in the prefix).
size_t verify_attn_workspace_bound_bytes(const VerifyAttnParams& p);

KernelResult verify_attn(const VerifyAttnParams& p, cudaStream_t stream);

// The argument checks of the launcher that need no device (also used by emulated tests).
inline KernelResult check_verify_attn_params(const VerifyAttnParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch <= 0) return KernelResult::invalid("verify_attn: batch must be >= 1, got " + s(p.batch));
  if (p.heads <= 0 || p.heads > kVerifyMaxHeads)
    return KernelResult::over_limit("verify_attn: heads " + s(p.heads) + " outside 1.." + s(kVerifyMaxHeads));
  if (p.tree_len <= 0 || p.tree_len > kVerifyMaxTreeLen)
    return KernelResult::over_limit("verify_attn: tree_len " + s(p.tree_len) + " outside 1.." +
                                    s(kVerifyMaxTreeLen) + " (1 + kTreeMaxNodes)");
  if (p.max_prefix < 0 || p.max_prefix + static_cast<int64_t>(p.tree_len) > kVerifyMaxKeys)
    return KernelResult::over_limit("verify_attn: max_prefix " + s(p.max_prefix) + " outside 0.." +
                                    s(kVerifyMaxKeys - p.tree_len));
  if (p.kv_row_stride < kVerifyQKDim || p.kv_row_stride % 8 != 0)
    return KernelResult::invalid("verify_attn: kv_row_stride " + s(p.kv_row_stride) +
                                 " must be >= 576 and a multiple of 8 (16-byte rows)");
  if (p.batch > 1 && p.kv_batch_stride < (p.max_prefix + static_cast<int64_t>(p.tree_len)) * p.kv_row_stride)
    return KernelResult::invalid("verify_attn: kv_batch_stride " + s(p.kv_batch_stride) + " smaller than one request's " +
                                 s(p.max_prefix + static_cast<int64_t>(p.tree_len)) + " rows");
  if (p.vis_words < (p.tree_len + 31) / 32)
    return KernelResult::invalid("verify_attn: vis_words " + s(p.vis_words) + " < ceil(tree_len / 32) = " +
                                 s((p.tree_len + 31) / 32));
  if (static_cast<int64_t>(p.batch) * p.tree_len * p.vis_words > INT32_MAX)
    return KernelResult::over_limit("verify_attn: batch * tree_len * vis_words over 2^31 words of masks");
  if (!p.q_lat || !p.q_pe || !p.kv || !p.vis || !p.out)
    return KernelResult::invalid("verify_attn: q_lat, q_pe, kv, vis and out must be non-null");
  auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (misaligned(p.q_lat) || misaligned(p.q_pe) || misaligned(p.kv) || misaligned(p.out))
    return KernelResult::invalid("verify_attn: q_lat, q_pe, kv and out must be 16-byte aligned");
  if (p.kv_batch_stride % 8 != 0)
    return KernelResult::invalid("verify_attn: kv_batch_stride must be a multiple of 8 elements");
  if (!(p.scale > 0.0f) || p.scale != p.scale)
    return KernelResult::invalid("verify_attn: scale must be a positive number");
  return KernelResult::success();
}

}  // namespace kdtree
