// Element-wise model kernels: embedding lookup, residual add, SwiGLU's silu(gate) * up, and
// row copies (with a dtype change and an optional gather). Each rounds like the torch
// reference (python_engine/model/ops.py): one rounding per torch op in the model dtype.
// Host API; kernels in elementwise.cu. Row r of a [rows, cols] operand lives at
// base + r * stride (elements).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

// out[r] = table[ids[r]] * scale; an id outside 0..vocab-1 gives a zero row (never a fault:
// ids are checked on the host, this only keeps a bad one from reading out of bounds).
struct EmbedParams {
  ModelDType dtype = ModelDType::kF32;
  int rows = 0, dim = 0, vocab = 0;
  const int32_t* ids = nullptr;  // [rows]
  const void* table = nullptr;   // [vocab, dim]
  float scale = 1.0f;            // 1 copies exactly
  void* out = nullptr;
  int64_t out_stride = 0;
};

// x[r] = x[r] + y[r]
struct AddParams {
  ModelDType dtype = ModelDType::kF32;
  int rows = 0, dim = 0;
  void* x = nullptr;
  int64_t x_stride = 0;
  const void* y = nullptr;
  int64_t y_stride = 0;
};

// out[r] = silu(gate[r]) * up[r]   (SwiGLU's middle: silu rounded, then the product)
struct SiluMulParams {
  ModelDType dtype = ModelDType::kF32;
  int rows = 0, dim = 0;
  const void* gate = nullptr;
  int64_t gate_stride = 0;
  const void* up = nullptr;
  int64_t up_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
};

// out[out_index ? out_index[r] : r, :cols] = in[index ? index[r] : r, :cols] converted to
// out_dtype: a gather (index), a scatter (out_index) or both. index[r] < 0 writes a zero
// row; out_index[r] < 0 skips row r.
struct CopyRowsParams {
  ModelDType in_dtype = ModelDType::kF32, out_dtype = ModelDType::kF32;
  int rows = 0, cols = 0;
  const void* in = nullptr;
  int64_t in_stride = 0;
  const int32_t* index = nullptr;      // [rows] or null
  const int32_t* out_index = nullptr;  // [rows] or null
  void* out = nullptr;
  int64_t out_stride = 0;
};

// float32 logits in place: l = l * multiplier, then softcap * tanh(l / softcap) when softcap > 0
// (the drafter's output_multiplier and final_logit_softcapping).
struct LogitsTransformParams {
  int rows = 0, cols = 0;
  float* logits = nullptr;
  int64_t stride = 0;
  float multiplier = 1.0f;
  float softcap = 0.0f;
};

KernelResult embed(const EmbedParams& p, cudaStream_t stream);
KernelResult logits_transform(const LogitsTransformParams& p, cudaStream_t stream);
KernelResult add_inplace(const AddParams& p, cudaStream_t stream);
KernelResult silu_mul(const SiluMulParams& p, cudaStream_t stream);
KernelResult copy_rows(const CopyRowsParams& p, cudaStream_t stream);

// A simulated group's all-reduce (engine/collective.cpp): every dst[i][j] = src[0][j] +
// src[1][j] + ... in rank order, summed in float32 and rounded once, so every rank reads the
// same value. src and dst may be the same buffers.
constexpr int kSumRanksMax = 8;  // KD_MAX_WORLD
struct SumRanksParams {
  ModelDType dtype = ModelDType::kF32;
  int64_t count = 0;
  int ranks = 0;
  const void* src[kSumRanksMax] = {};
  void* dst[kSumRanksMax] = {};
};
KernelResult sum_ranks(const SumRanksParams& p, cudaStream_t stream);

inline KernelResult check_rows_cols(const char* what, int rows, int cols, std::initializer_list<int64_t> strides,
                                    std::initializer_list<const void*> ptrs) {
  const std::string w(what);
  if (rows < 0 || cols < 0) return KernelResult::invalid(w + ": rows and cols must be >= 0");
  for (int64_t s : strides)
    if (s < cols) return KernelResult::invalid(w + ": a row stride is smaller than the row (" + std::to_string(cols) + ")");
  if (rows > 0 && cols > 0)
    for (const void* ptr : ptrs)
      if (!ptr) return KernelResult::invalid(w + ": a data pointer is null");
  return KernelResult::success();
}

}  // namespace kdtree
