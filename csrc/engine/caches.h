// Per-slot device state: the target's latent cache, the drafter's context K/V, and the
// decoding state arrays (kernels/round_ops.cuh::SlotState). All sized at create time.
//
// Target cache: [layers][slots][capacity][576] in the compute dtype (verify_attn's rows;
// zeroed once, so a model narrower than 512 + 64 keeps zero padding). Drafter cache: K and
// V, each [layers][slots][capacity][kv_heads * head_dim].
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device_memory.h"
#include "engine/model_config.h"
#include "kernels/round_ops.cuh"
#include "kernels/tree_accept.cuh"

namespace kdtree::engine {

class TargetCache {
 public:
  TargetCache(const TargetDims& t, const EngineLimits& l, cudaStream_t stream);
  static size_t bytes_for(const TargetDims& t, const EngineLimits& l);  // what the constructor allocates
  void* layer(int l, int first_slot = 0) const;
  CacheWords words(int first_slot = 0) const;  // every layer from slot first_slot on, as cache_compact takes it
  int64_t slot_stride() const { return static_cast<int64_t>(capacity_) * row_; }  // elements
  int64_t layer_stride() const { return slot_stride() * slots_; }
  int capacity() const { return capacity_; }
  int layers() const { return layers_; }
  ModelDType dtype() const { return dtype_; }
  size_t bytes() const { return mem_.size(); }

 private:
  int layers_, slots_, capacity_, row_;
  ModelDType dtype_;
  DeviceBuffer mem_;
};

class DrafterCache {
 public:
  DrafterCache(const DrafterDims& d, const EngineLimits& l, cudaStream_t stream);
  static size_t bytes_for(const DrafterDims& d, const EngineLimits& l);  // what the constructor allocates
  void* keys(int l, int first_slot = 0) const;
  void* values(int l, int first_slot = 0) const;
  int64_t row() const { return row_; }
  int64_t slot_stride() const { return static_cast<int64_t>(capacity_) * row_; }
  int capacity() const { return capacity_; }
  size_t bytes() const { return mem_.size(); }

 private:
  int layers_, slots_, capacity_, row_;
  ModelDType dtype_;
  DeviceBuffer mem_;
};

// SlotState on the device plus what the host keeps of it.
class SlotTable {
 public:
  SlotTable(const EngineLimits& l, cudaStream_t stream);
  const SlotState& device() const { return state_; }
  SlotState at(int first_slot) const;  // the arrays from slot first_slot on
  int slots() const { return slots_; }
  float* temperature() const { return temperature_; }  // [slots] device
  uint64_t* seed() const { return seed_; }              // [slots] device
  size_t bytes() const { return mem_.size(); }

  // Host-side values written to the device (outside graphs): one field of one slot.
  void set(int32_t* field, int slot, int32_t value, cudaStream_t stream) const;

 private:
  int slots_;
  DeviceBuffer mem_;
  SlotState state_;
  float* temperature_ = nullptr;
  uint64_t* seed_ = nullptr;
};

}  // namespace kdtree::engine
