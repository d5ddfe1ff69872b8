// Device and pinned host memory the engine owns: RAII buffers, and the plan-then-allocate
// layout that gives each engine region (weights, caches, workspace) one allocation whose
// size is known before anything is allocated (docs/engine.md: memory is decided at create
// time, nothing is allocated inside a round).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace kdtree::engine {

constexpr size_t kDeviceAlign = 256;  // cudaMalloc's own alignment; keeps every sub-buffer 16-byte vector-ready

inline size_t align_up(size_t v, size_t a = kDeviceAlign) { return (v + a - 1) / a * a; }

// One cudaMalloc. Throws EngineError (KD_OUT_OF_MEMORY) naming `what` when it fails.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  char* bytes_ptr(size_t offset = 0) const { return static_cast<char*>(ptr_) + offset; }
  size_t size() const { return bytes_; }
  void release();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): staging for loads, the round report.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t bytes, const std::string& what);
  ~PinnedBuffer() { release(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  void release();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Offsets of named sub-buffers in one allocation, laid out before allocating.
class ArenaLayout {
 public:
  size_t add(size_t bytes) {
    const size_t at = total_;
    total_ = align_up(total_ + bytes);
    return at;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// The device's memory now (free, total).
std::pair<size_t, size_t> device_memory_info();

}  // namespace kdtree::engine
