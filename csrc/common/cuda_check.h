// Error checks for CUDA runtime and cuBLAS calls and for kernel launches.
//
//   KD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
//   KD_CUBLAS_CHECK(cublasGemmEx(handle, ...));
//   my_kernel<<<grid, block, smem, stream>>>(params);
//   KD_CHECK_LAUNCH();
//
// A failure throws kdtree::CudaError whose message names the file, the line, the failing
// expression and the library's own error name and text, e.g.
//   csrc/kernels/verify_attn.cu:88: cudaErrorInvalidValue (invalid argument) in
//   `cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream)`
// Throwing (rather than exit()) lets a test case fail on its own and lets the engine report
// the error as a metrics event before it stops.
//
// In debug builds (KDTREE_DEBUG_SYNC, set by `kdtree build --profile debug`) KD_CHECK_LAUNCH()
// also synchronises the device, so a fault inside the kernel is reported at its launch site
// instead of at some later, unrelated call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace kdtree {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // A failed runtime call also leaves its (non-sticky) error as the thread's "last error";
  // clear it so the next KD_CHECK_LAUNCH reports that launch, not this older failure.
  (void)cudaGetLastError();
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ") in `" + expr + "`");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                            int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + cublasGetStatusName(status) +
                  " (" + cublasGetStatusString(status) + ") in `" + expr + "`");
}

inline void check_launch(const char* file, int line) {
  // cudaGetLastError reports (and clears) launch errors: bad grid/block, too much shared
  // memory, no kernel image for this GPU (built for the wrong --arch).
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, "kernel launch", file, line);
#ifdef KDTREE_DEBUG_SYNC
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) throw_cuda_error(err, "kernel execution (KDTREE_DEBUG_SYNC)", file, line);
#endif
}

}  // namespace detail
}  // namespace kdtree

#define KD_CUDA_CHECK(expr)                                                             \
  do {                                                                                  \
    const cudaError_t kd_err_ = (expr);                                                 \
    if (kd_err_ != cudaSuccess) ::kdtree::detail::throw_cuda_error(kd_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define KD_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                  \
    const cublasStatus_t kd_status_ = (expr);                                           \
    if (kd_status_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::kdtree::detail::throw_cublas_error(kd_status_, #expr, __FILE__, __LINE__);      \
  } while (0)

#define KD_CHECK_LAUNCH() ::kdtree::detail::check_launch(__FILE__, __LINE__)
