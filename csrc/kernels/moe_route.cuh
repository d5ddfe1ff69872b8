// The DeepSeek-V3 router (noaux_tc) and the token <-> expert bookkeeping of the MoE block
// (python_engine/model/moe.py::route / moe_forward):
//   moe_route:   s = sigmoid(logits); pick within the best topk_group groups (group score =
//                sum of its top two s + bias) the top_k experts by s + bias; weights = s of
//                those, normalised when norm_topk, times the scaling factor. Ties: lower id.
//   moe_group:   the (token, j) pairs sorted by expert: per-expert offsets, the token of each
//                grouped row and the grouped row of each pair (for the grouped GEMMs).
//   moe_combine: out[t] = sum_j w[t, j] * y[row(t, j)] in float32, rounded, plus the shared
//                experts' output (rounded again, as the reference adds in the model dtype).
// Host API; kernels in moe_route.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

constexpr int kMoeMaxExperts = 1024;  // experts per layer (Kimi K2.6: 384); one warp scans them
constexpr int kMoeMaxGroups = 32;     // n_group: one lane per group
constexpr int kMoeMaxTopk = 32;       // num_experts_per_tok

struct MoeRouteParams {
  int tokens = 0, experts = 0, groups = 1, topk_group = 1, topk = 1;
  bool norm_topk = true;
  float scaling = 1.0f;            // routed_scaling_factor
  const float* logits = nullptr;   // [tokens, experts] router logits, float32
  const float* bias = nullptr;     // [experts] e_score_correction_bias
  int32_t* topk_ids = nullptr;     // [tokens, topk] out, by descending s + bias
  float* topk_weights = nullptr;   // [tokens, topk] out
};

struct MoeGroupParams {
  int tokens = 0, experts = 0, topk = 0;
  const int32_t* topk_ids = nullptr;  // [tokens, topk]
  int32_t* offsets = nullptr;         // [experts + 1] out: expert e's rows are offsets[e] .. offsets[e+1]-1
  int32_t* row_token = nullptr;       // [tokens * topk] out: the token of each grouped row
  int32_t* pair_row = nullptr;        // [tokens * topk] out: the grouped row of pair (t, j)
  // Optional out: [active_end - active_begin] the experts of [active_begin, active_end) that
  // own rows, in increasing order and relative to active_begin, then -1 (the grouped GEMMs'
  // slot -> expert list: MoeW4a16Params::active_experts). active_end 0: all experts.
  int32_t* active_experts = nullptr;
  int active_begin = 0, active_end = 0;
};

struct MoeCombineParams {
  ModelDType dtype = ModelDType::kF32;
  int tokens = 0, hidden = 0, topk = 0;
  const void* expert_out = nullptr;   // [tokens * topk, hidden] grouped rows (down projections)
  const int32_t* pair_row = nullptr;  // [tokens * topk]
  const float* topk_weights = nullptr;
  // Expert parallelism: with topk_ids given, only pairs whose expert is in
  // [expert_begin, expert_end) count (the others' rows belong to another rank).
  const int32_t* topk_ids = nullptr;
  int expert_begin = 0, expert_end = 0;
  const void* shared_out = nullptr;   // [tokens, hidden] shared experts' output, or null
  void* out = nullptr;                // [tokens, hidden]
};

// The groups of arguments the three params structs are built from (make_moe_route_params,
// make_moe_group_params, make_moe_combine_params), so that every caller names what it passes
// and two arrays of one type cannot trade places.

// The router's picks for `tokens` tokens: moe_route writes them, moe_group and moe_combine read them.
struct MoeTopk {
  int tokens = 0, topk = 1;
  int32_t* ids = nullptr;      // [tokens, topk] by descending s + bias
  float* weights = nullptr;    // [tokens, topk]
};

// One layer's router (noaux_tc): the model's routing constants and its correction bias.
struct MoeRouter {
  int experts = 0, groups = 1, topk_group = 1;  // n_routed_experts, n_group, topk_group
  bool norm_topk = true;
  float scaling = 1.0f;                         // routed_scaling_factor
  const float* bias = nullptr;                  // [experts] e_score_correction_bias
};

// What moe_group writes (besides the optional active list).
struct MoeGroupOutputs {
  int32_t* offsets = nullptr;    // [experts + 1]
  int32_t* row_token = nullptr;  // [tokens * topk] the token of each grouped row
  int32_t* pair_row = nullptr;   // [tokens * topk] the grouped row of pair (t, j)
};

// moe_group's optional slot -> expert list over [begin, end) (MoeGroupParams::active_experts);
// experts null (the default): none.
struct MoeActiveList {
  int32_t* experts = nullptr;
  int begin = 0, end = 0;  // end 0: all experts
};

// What moe_combine sums per token: its pairs' grouped rows and the shared experts' output.
struct MoeCombineInputs {
  int hidden = 0;
  const void* expert_out = nullptr;   // [tokens * topk, hidden] grouped rows (down projections)
  const int32_t* pair_row = nullptr;  // [tokens * topk] (moe_group's)
  const void* shared_out = nullptr;   // [tokens, hidden], or null
};

// Expert parallelism: this rank's experts [begin, end). Empty (the default): every pair counts.
struct MoeExpertRange {
  int begin = 0, end = 0;
};

// The one place MoeRouteParams are built: `router` over the [topk.tokens, router.experts]
// float32 `logits`, its picks into `topk`.
inline MoeRouteParams make_moe_route_params(const MoeRouter& router, const float* logits, const MoeTopk& topk) {
  MoeRouteParams p;
  p.tokens = topk.tokens;
  p.experts = router.experts;
  p.groups = router.groups;
  p.topk_group = router.topk_group;
  p.topk = topk.topk;
  p.norm_topk = router.norm_topk;
  p.scaling = router.scaling;
  p.logits = logits;
  p.bias = router.bias;
  p.topk_ids = topk.ids;
  p.topk_weights = topk.weights;
  return p;
}

// The one place MoeGroupParams are built: the pairs of `topk` grouped over `experts` into
// `out`, and the active list when `active` has one.
inline MoeGroupParams make_moe_group_params(const MoeTopk& topk, int experts, const MoeGroupOutputs& out,
                                            const MoeActiveList& active) {
  MoeGroupParams p;
  p.tokens = topk.tokens;
  p.experts = experts;
  p.topk = topk.topk;
  p.topk_ids = topk.ids;
  p.offsets = out.offsets;
  p.row_token = out.row_token;
  p.pair_row = out.pair_row;
  p.active_experts = active.experts;
  p.active_begin = active.begin;
  p.active_end = active.end;
  return p;
}

// The one place MoeCombineParams are built: the pairs of `topk` (those of `range` alone when
// it is not empty) summed from `in`, in `dtype`, into out [topk.tokens, in.hidden].
inline MoeCombineParams make_moe_combine_params(ModelDType dtype, const MoeTopk& topk, const MoeCombineInputs& in,
                                                const MoeExpertRange& range, void* out) {
  MoeCombineParams p;
  p.dtype = dtype;
  p.tokens = topk.tokens;
  p.hidden = in.hidden;
  p.topk = topk.topk;
  p.expert_out = in.expert_out;
  p.pair_row = in.pair_row;
  p.topk_weights = topk.weights;
  if (range.end > range.begin) {
    p.topk_ids = topk.ids;
    p.expert_begin = range.begin;
    p.expert_end = range.end;
  }
  p.shared_out = in.shared_out;
  p.out = out;
  return p;
}

KernelResult moe_route(const MoeRouteParams& p, cudaStream_t stream);
KernelResult moe_group(const MoeGroupParams& p, cudaStream_t stream);
KernelResult moe_combine(const MoeCombineParams& p, cudaStream_t stream);

inline KernelResult check_moe_route_params(const MoeRouteParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.tokens < 0) return KernelResult::invalid("moe_route: tokens must be >= 0");
  if (p.experts < 2 || p.experts > kMoeMaxExperts)
    return KernelResult::over_limit("moe_route: experts " + s(p.experts) + " outside 2.." + s(kMoeMaxExperts));
  if (p.groups < 1 || p.groups > kMoeMaxGroups || p.experts % p.groups)
    return KernelResult::invalid("moe_route: n_group " + s(p.groups) + " must divide the experts and be <= " +
                                 s(kMoeMaxGroups));
  if (p.topk_group < 1 || p.topk_group > p.groups)
    return KernelResult::invalid("moe_route: topk_group " + s(p.topk_group) + " outside 1..n_group");
  if (p.topk < 1 || p.topk > kMoeMaxTopk || p.topk > p.topk_group * (p.experts / p.groups))
    return KernelResult::invalid("moe_route: top_k " + s(p.topk) + " is more than the experts of topk_group groups");
  if (p.tokens > 0 && (!p.logits || !p.bias || !p.topk_ids || !p.topk_weights))
    return KernelResult::invalid("moe_route: logits, bias, topk_ids and topk_weights must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
