#include "engine/gemm.h"

#include "common/cuda_check.h"
#include "engine/engine_error.h"

namespace kdtree::engine {
namespace {

// cuBLAS's documented recommendation for Hopper (32 MiB) covers every other GPU too.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

cudaDataType cuda_type(ModelDType t) { return t == ModelDType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

}  // namespace

Gemm::~Gemm() {
  if (handle_) (void)cublasDestroy(handle_);
}

void Gemm::init(cudaStream_t stream) {
  KD_CUBLAS_CHECK(cublasCreate(&handle_));
  KD_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  // float32 means float32: no TF32 behind our back
  KD_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  workspace_ = DeviceBuffer(kCublasWorkspaceBytes, "the cuBLAS workspace");
  KD_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.size()));
}

// Row-major y[rows, out] = x[rows, in] w^T is column-major y^T = w x^T: with cuBLAS's
// column-major view of our row-major buffers, A = w (in x out, ld = ldw) transposed,
// B = x (in x rows, ld = ldx), C = y (out x rows, ld = ldy).
void Gemm::linear(int rows, int out, int in, Matrix x, Matrix w, MatrixOut y) {
  if (rows == 0) return;
  const float one = 1.0f, zero = 0.0f;
  KD_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w.data, cuda_type(w.dtype),
                               static_cast<int>(w.ld), x.data, cuda_type(x.dtype), static_cast<int>(x.ld), &zero,
                               y.data, cuda_type(y.dtype), static_cast<int>(y.ld), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

void Gemm::batched(int batch, int rows, int out, int in, Matrix x, int64_t x_stride, Matrix w, int64_t w_stride,
                   bool transpose_w, MatrixOut y, int64_t y_stride) {
  if (rows == 0 || batch == 0) return;
  const float one = 1.0f, zero = 0.0f;
  // w [out, in] row-major is (in x out) column-major: op T gives out x in. w [in, out]
  // row-major is (out x in) column-major: op N.
  KD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle_, transpose_w ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, out, rows, in, &one, w.data, cuda_type(w.dtype),
      static_cast<int>(w.ld), w_stride, x.data, cuda_type(x.dtype), static_cast<int>(x.ld), x_stride, &zero, y.data,
      cuda_type(y.dtype), static_cast<int>(y.ld), y_stride, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace kdtree::engine
