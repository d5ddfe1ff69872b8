// The engine's dense matrix products through cuBLAS, in nn.Linear terms (row-major, weights
// [out, in]); float32 accumulation always (CUBLAS_COMPUTE_32F, no TF32), outputs in the
// compute dtype or float32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/device_memory.h"
#include "kernels/model_dtype.cuh"

namespace kdtree::engine {

// A row-major operand: element (r, c) at data + r * ld + c.
struct Matrix {
  const void* data = nullptr;
  int64_t ld = 0;
  ModelDType dtype = ModelDType::kF32;
};
struct MatrixOut {
  void* data = nullptr;
  int64_t ld = 0;
  ModelDType dtype = ModelDType::kF32;
};

class Gemm {
 public:
  Gemm() = default;
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void init(cudaStream_t stream);  // creates the handle and its fixed workspace (graph capture needs one)
  size_t workspace_bytes() const { return workspace_.size(); }

  // y[rows, out] = x[rows, in] @ w[out, in]^T
  void linear(int rows, int out, int in, Matrix x, Matrix w, MatrixOut y);

  // For each batch index i: y_i[rows, out] = x_i[rows, in] @ op(w_i), where op(w_i) = w_i^T for
  // w_i [out, in] (transpose_w) or w_i for w_i [in, out]; operand i at base + i * stride.
  void batched(int batch, int rows, int out, int in, Matrix x, int64_t x_stride, Matrix w, int64_t w_stride,
               bool transpose_w, MatrixOut y, int64_t y_stride);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace kdtree::engine
