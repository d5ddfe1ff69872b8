// C entry points to the W4A16 expert GEMM and its repack, built with the SIMT emulator into
// a small shared library (with emu/runtime/cuda_runtime.cpp for the runtime calls) so that
// tests/kernels/test_moe_w4a16_emulated.py drives the kernel's own source from Python on
// host arrays and compares it with the torch reference of the dequantized experts
// (python_engine/model/int4.py). Not part of any shipped library.
#include <cstdio>

#include "kernels/moe_gemm_w4a16.cuh"

namespace {

int report(const kdtree::KernelResult& r, char* err, int err_len) {
  if (err && err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "%s", r.message.c_str());
  return static_cast<int>(r.status);
}

}  // namespace

extern "C" {

int64_t kd_w4a16_expert_words(int n, int k) { return kdtree::moe_w4a16_expert_words(n, k); }

int kd_w4a16_repack(const int32_t* weight_packed, const uint16_t* weight_scale, int n, int k, uint32_t* dst,
                    char* err, int err_len) {
  return report(kdtree::moe_w4a16_repack(weight_packed, weight_scale, n, k, dst), err, err_len);
}

// Arguments as the fields of MoeW4a16Params (row_tile: 0 auto, 8, 16, 32; k_slices: 0 auto, 1,
// 2, 4; x_source: 0 auto, 1 global, 2 shared; cta_warps: 0 auto, 4, 8; active_experts may be
// null); returns the KernelStatus (0 = ok), the message in err.
int kd_w4a16_gemm(int experts, int rows, int n, int k, int max_rows_per_expert, int row_tile, int k_slices, int x_source,
                  int cta_warps, const void* x,
                  int64_t x_stride, const int32_t* x_row, const int32_t* offsets, const int32_t* active_experts,
                  const uint32_t* w,
                  const uint32_t* w_up, int64_t w_expert_stride, void* out, int64_t out_stride, char* err,
                  int err_len) {
  kdtree::MoeRoutedRows routed;
  routed.experts = experts;
  routed.rows = rows;
  routed.offsets = offsets;
  routed.active_experts = active_experts;
  routed.max_rows_per_expert = max_rows_per_expert;
  kdtree::MoeInputRows in;
  in.x = x;
  in.x_stride = x_stride;
  in.x_row = x_row;
  kdtree::MoeW4a16Weights weights;
  weights.w = w;
  weights.w_up = w_up;
  weights.w_expert_stride = w_expert_stride;
  weights.n = n;
  weights.k = k;
  kdtree::MoeOutputRows rows_out;
  rows_out.out = out;
  rows_out.out_stride = out_stride;
  kdtree::MoeW4a16Params p = kdtree::make_moe_w4a16_params(routed, in, weights, rows_out);
  p.row_tile = static_cast<kdtree::W4RowTile>(row_tile);
  p.k_slices = k_slices;
  p.x_source = static_cast<kdtree::W4XSource>(x_source);
  p.cta_warps = cta_warps;
  return report(kdtree::moe_gemm_w4a16(p, nullptr), err, err_len);
}

}  // extern "C"
