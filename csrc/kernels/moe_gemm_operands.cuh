// The operands both grouped expert GEMMs take (moe_gemm.cuh, moe_gemm_w4a16.cuh): the rows
// moe_group grouped by expert, the input rows they read and the output rows they write. Their
// builders (make_moe_gemm_params, make_moe_w4a16_params) take these groups by name, so that a
// caller names what it passes and two fields of one type cannot trade places.
#pragma once

#include <cstdint>

namespace kdtree {

// The grouped rows of one launch (moe_route.cuh::moe_group's offsets and active list).
struct MoeRoutedRows {
  int experts = 0;                   // experts whose weights the launch holds
  int rows = 0;                      // grouped rows (tokens * top_k)
  const int32_t* offsets = nullptr;  // [experts + 1] expert e owns rows offsets[e] .. offsets[e+1]-1
  // W4A16 only (moe_gemm ignores them): the experts that own rows, then -1, or null
  // (MoeW4a16Params::active_experts); the most rows one expert can own, 0 = unknown
  // (MoeW4a16Params::max_rows_per_expert)
  const int32_t* active_experts = nullptr;
  int max_rows_per_expert = 0;
};

// The rows the GEMM reads: grouped row r reads x row (x_row ? x_row[r] : r).
struct MoeInputRows {
  const void* x = nullptr;
  int64_t x_stride = 0;            // elements between x rows
  const int32_t* x_row = nullptr;  // [rows] or null
};

// The rows the GEMM writes: [rows, n] at out + r * out_stride.
struct MoeOutputRows {
  void* out = nullptr;
  int64_t out_stride = 0;  // elements between output rows
};

// The fields MoeGemmParams and MoeW4a16Params share (of one name in both), from the groups
// above and a projection's weights (MoeExpertWeights or MoeW4a16Weights): the common part of
// make_moe_gemm_params and make_moe_w4a16_params, for them alone.
template <class Params, class Weights>
inline void set_moe_gemm_operands(Params& p, const MoeRoutedRows& rows, const MoeInputRows& in, const Weights& weights,
                                  const MoeOutputRows& out) {
  p.experts = rows.experts;
  p.rows = rows.rows;
  p.offsets = rows.offsets;
  p.n = weights.n;
  p.k = weights.k;
  p.w = weights.w;
  p.w_up = weights.w_up;
  p.w_expert_stride = weights.w_expert_stride;
  p.x = in.x;
  p.x_stride = in.x_stride;
  p.x_row = in.x_row;
  p.out = out.out;
  p.out_stride = out.out_stride;
}

}  // namespace kdtree
