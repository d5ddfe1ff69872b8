// A device allocation for tests: RAII, typed, with upload/download that check every call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "common/cuda_check.h"

namespace kdtree::test {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    // through void** (not the runtime's T** template, which host-compiler builds lack)
    KD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), (count > 0 ? count : 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw CudaError("DeviceBuffer::upload: size mismatch");
    if (count_) KD_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(std::vector<T>& host) const {
    host.resize(count_);
    if (count_) KD_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
  }
  std::vector<T> download() const {
    std::vector<T> host;
    download(host);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Device copies of a launch's host vectors, made on first use: copies(v) uploads v once and
// gives the copy's pointer (again on later calls), so the case files' *_params(io, at)
// builders fill GPU launches from the same code as emulated ones; download(v) copies back.
class DeviceCopies {
 public:
  template <class T>
  T* operator()(const std::vector<T>& host) {
    if (DeviceBuffer<T>* buf = find<T>(host)) return buf->get();
    auto buf = std::make_shared<DeviceBuffer<T>>(host);
    held_.push_back({&host, buf});
    return buf->get();
  }
  template <class T>
  void download(std::vector<T>& host) const {
    const DeviceBuffer<T>* buf = find<T>(host);
    if (!buf) throw CudaError("DeviceCopies::download: this vector has no device copy");
    buf->download(host);
  }

 private:
  struct Held {
    const void* host;
    std::shared_ptr<void> buf;  // a DeviceBuffer<T> of the host vector's T
  };
  template <class T>
  DeviceBuffer<T>* find(const std::vector<T>& host) const {
    for (const Held& h : held_)
      if (h.host == &host) return static_cast<DeviceBuffer<T>*>(h.buf.get());
    return nullptr;
  }
  std::vector<Held> held_;
};

}  // namespace kdtree::test
