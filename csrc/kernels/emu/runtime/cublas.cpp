// The cuBLAS calls of the engine, on the host, for the emulated build: GemmEx and
// GemmStridedBatchedEx with cuBLAS's column-major semantics (op(A) m x k, op(B) k x n,
// C m x n; element (i, j) of a column-major X at X[i + j * ld]), float32 or bf16 operands,
// accumulation in double (more exact than the GPU: the tests' tolerances cover both).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstring>
#include <vector>

namespace {

struct EmuHandle {
  cudaStream_t stream = nullptr;
};

float load(const void* base, cudaDataType t, int64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(base)[i];
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(base) + 2 * i, 2);
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

void store(void* base, cudaDataType t, int64_t i, float v) {
  if (t == CUDA_R_32F) {
    static_cast<float*>(base)[i] = v;
    return;
  }
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  std::memcpy(static_cast<char*>(base) + 2 * i, &b, 2);
}

bool supported(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

// op(X) as a dense row-major [rows x cols] float matrix: row r = output index (i or j),
// column = the inner index l, so every dot product below walks two contiguous rows.
std::vector<float> gather(const void* x, cudaDataType t, int ld, bool transposed, int rows, int cols,
                          bool rows_are_first_index) {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      // A: op(A)(i, l): N -> A[i + l*ld], T -> A[l + i*ld]   (rows = i, cols = l)
      // B: op(B)(l, j): N -> B[l + j*ld], T -> B[j + l*ld]   (rows = j, cols = l)
      int64_t idx;
      if (rows_are_first_index) idx = transposed ? c + static_cast<int64_t>(r) * ld : r + static_cast<int64_t>(c) * ld;
      else idx = transposed ? r + static_cast<int64_t>(c) * ld : c + static_cast<int64_t>(r) * ld;
      out[static_cast<size_t>(r) * cols + c] = load(x, t, idx);
    }
  return out;
}

// Four partial sums (l mod 4): independent chains the compiler vectorises; one in-order
// chain was the emulated engine's largest single cost. Still double: far below the GPU's error.
constexpr int kDotChains = 4;
double dot(const float* a, const float* b, int k) {
  double part[kDotChains] = {};
  int l = 0;
  for (; l + kDotChains <= k; l += kDotChains)
    for (int c = 0; c < kDotChains; ++c) part[c] += static_cast<double>(a[l + c]) * b[l + c];
  for (; l < k; ++l) part[0] += static_cast<double>(a[l]) * b[l];
  return (part[0] + part[1]) + (part[2] + part[3]);
}

cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                    const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb,
                    const float* beta, void* C, cudaDataType ct, int ldc) {
  if (m < 0 || n < 0 || k < 0 || !supported(at) || !supported(bt) || !supported(ct)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  const std::vector<float> a = gather(A, at, lda, ta == CUBLAS_OP_T, m, k, /*rows_are_first_index=*/true);
  const std::vector<float> b = gather(B, bt, ldb, tb == CUBLAS_OP_T, n, k, /*rows_are_first_index=*/false);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float* ar = &a[static_cast<size_t>(i) * k];
      const float* br = &b[static_cast<size_t>(j) * k];
      const double acc = dot(ar, br, k);
      const int64_t ci = i + static_cast<int64_t>(j) * ldc;
      double v = *alpha * acc;
      if (*beta != 0.0f) v += static_cast<double>(*beta) * load(C, ct, ci);
      store(C, ct, ci, static_cast<float>(v));
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new EmuHandle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete reinterpret_cast<EmuHandle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  reinterpret_cast<EmuHandle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "an invalid value (CPU emulation)";
}

cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                            int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(ta, tb, m, n, k, static_cast<const float*>(alpha), A, at, lda, B, bt, ldb,
              static_cast<const float*>(beta), C, ct, ldc);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long int sa, const void* B, cudaDataType bt, int ldb, long long int sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long int sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto bytes = [](cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; };
  for (int i = 0; i < batch; ++i) {
    const cublasStatus_t s =
        gemm(ta, tb, m, n, k, static_cast<const float*>(alpha), static_cast<const char*>(A) + i * sa * bytes(at), at,
             lda, static_cast<const char*>(B) + i * sb * bytes(bt), bt, ldb, static_cast<const float*>(beta),
             static_cast<char*>(C) + i * sc * bytes(ct), ct, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
