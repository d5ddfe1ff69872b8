// Activation buffers laid out in one allocation: each model part declares its buffers
// (declare), the engine allocates the total once, then every part binds its pointers
// (bind). Nothing is allocated after create, so rounds can be captured in CUDA graphs.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/device_memory.h"

namespace kdtree::engine {

class Workspace {
 public:
  // Reserve `bytes`; *slot receives the pointer at bind time.
  template <class T>
  void declare(T** slot, size_t bytes, bool zeroed = false) {
    entries_.push_back({reinterpret_cast<void**>(slot), layout_.add(bytes), bytes, zeroed});
  }
  size_t total() const { return layout_.total(); }
  // Allocate and hand out every pointer; zero the buffers that asked for it.
  void allocate(cudaStream_t stream);
  size_t bytes() const { return memory_.size(); }

 private:
  struct Entry {
    void** slot;
    size_t offset, bytes;
    bool zeroed;
  };
  ArenaLayout layout_;
  std::vector<Entry> entries_;
  DeviceBuffer memory_;
};

}  // namespace kdtree::engine
