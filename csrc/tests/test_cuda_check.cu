// The check macros of common/cuda_check.h, cuBLAS linking, and (on a GPU) that this build's
// targets run on the device at hand: a kernel built for the wrong --arch fails to launch
// with "no kernel image is available", which KD_CHECK_LAUNCH reports.
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/test_harness.h"

namespace {

constexpr int kN = 1000;  // elements in the smoke-test kernel: several blocks, a ragged tail
constexpr int kThreads = 256;
// More threads per block than any CUDA GPU allows (the limit is 1024): a launch error.
constexpr int kTooManyThreads = 4096;

__global__ void affine(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i] + 1.f;
}

std::string thrown_by(void (*fn)()) {
  try {
    fn();
  } catch (const kdtree::CudaError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

KD_TEST(cuda_check_passes_success_through) {
  KD_CUDA_CHECK(cudaSuccess);
  KD_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS);
}

KD_TEST(cuda_check_names_file_line_expression_and_error) {
  // Fails everywhere: no driver or no GPU here, an invalid device id on a GPU machine.
  const std::string msg = thrown_by([] { KD_CUDA_CHECK(cudaSetDevice(-1)); });
  KD_EXPECT(msg.find("test_cuda_check.cu:") != std::string::npos);
  KD_EXPECT(msg.find("in `cudaSetDevice(-1)`") != std::string::npos);
  KD_EXPECT(msg.find("cudaError") != std::string::npos);
  if (!msg.empty()) std::printf("    message: %s\n", msg.c_str());
}

KD_TEST(cublas_check_names_the_status_and_cublas_loads) {
  const std::string msg = thrown_by([] { KD_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); });
  KD_EXPECT(msg.find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos);
  KD_EXPECT(msg.find("test_cuda_check.cu:") != std::string::npos);
  int major = 0;  // answered by libcublas itself: proves it was linked and found at run time
  KD_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  KD_EXPECT_EQ(major, CUBLAS_VER_MAJOR);
}

KD_GPU_TEST(kernel_runs_on_this_gpu) {
  std::vector<float> x(kN), y(kN, 0.f);
  for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(i % 97) * 0.5f - 7.f;
  float *dx = nullptr, *dy = nullptr;
  KD_CUDA_CHECK(cudaMalloc(&dx, kN * sizeof(float)));
  KD_CUDA_CHECK(cudaMalloc(&dy, kN * sizeof(float)));
  KD_CUDA_CHECK(cudaMemcpy(dx, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  affine<<<(kN + kThreads - 1) / kThreads, kThreads>>>(dx, dy, kN);
  KD_CHECK_LAUNCH();
  KD_CUDA_CHECK(cudaMemcpy(y.data(), dy, kN * sizeof(float), cudaMemcpyDeviceToHost));
  KD_CUDA_CHECK(cudaFree(dx));
  KD_CUDA_CHECK(cudaFree(dy));
  for (int i = 0; i < kN; ++i) KD_EXPECT_EQ(y[i], 2.f * x[i] + 1.f);  // exact: small halves
}

KD_GPU_TEST(launch_check_reports_a_bad_launch) {
  const std::string msg = thrown_by([] {
    affine<<<1, kTooManyThreads>>>(nullptr, nullptr, 0);
    KD_CHECK_LAUNCH();
  });
  KD_EXPECT(msg.find("kernel launch") != std::string::npos);
  // CUDA 13 on the H200 answers a 4096-thread block with cudaErrorInvalidValue; older
  // runtimes said cudaErrorInvalidConfiguration. Either names the launch as invalid.
  KD_EXPECT(msg.find("cudaErrorInvalid") != std::string::npos);
  std::printf("    message: %s\n", msg.c_str());
}

KD_TEST_MAIN()
