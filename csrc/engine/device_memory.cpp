#include "engine/device_memory.h"

#include "engine/engine_error.h"

namespace kdtree::engine {

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // an allocation failure is not sticky: clear it
    ptr_ = nullptr;
    bytes_ = 0;
    const auto [free_b, total_b] = device_memory_info();
    fail(err == cudaErrorMemoryAllocation ? KD_OUT_OF_MEMORY : KD_CUDA_ERROR,
         what + " needs " + gib(static_cast<double>(bytes)) + " of GPU memory; cudaMalloc failed (" +
             cudaGetErrorString(err) + ") with " + gib(static_cast<double>(free_b)) + " free of " +
             gib(static_cast<double>(total_b)) + ". Lower --max-slots, --max-tokens or --budget.");
  }
}

void DeviceBuffer::release() {
  if (ptr_) (void)cudaFree(ptr_);  // freeing never throws: destructors run during unwinding
  ptr_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::PinnedBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMallocHost(&ptr_, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ptr_ = nullptr;
    bytes_ = 0;
    fail(KD_OUT_OF_MEMORY, what + " needs " + gib(static_cast<double>(bytes)) + " of pinned host memory: " +
                               cudaGetErrorString(err));
  }
}

void PinnedBuffer::release() {
  if (ptr_) (void)cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

std::pair<size_t, size_t> device_memory_info() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {free_b, total_b};
}

}  // namespace kdtree::engine
