#include "engine/caches.h"

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/verify_attn.cuh"

namespace kdtree::engine {

size_t TargetCache::bytes_for(const TargetDims& t, const EngineLimits& l) {
  return static_cast<size_t>(t.layers) * l.slots * l.cache_capacity() * kVerifyQKDim * model_dtype_bytes(l.dtype);
}

TargetCache::TargetCache(const TargetDims& t, const EngineLimits& l, cudaStream_t stream)
    : layers_(t.layers), slots_(l.slots), capacity_(l.cache_capacity()), row_(kVerifyQKDim), dtype_(l.dtype) {
  const size_t bytes = bytes_for(t, l);
  mem_ = DeviceBuffer(bytes, "the target's latent cache (" + std::to_string(slots_) + " slots x " +
                                 std::to_string(capacity_) + " rows x " + std::to_string(layers_) + " layers)");
  KD_CUDA_CHECK(cudaMemsetAsync(mem_.data(), 0, bytes, stream));
}

void* TargetCache::layer(int l, int first_slot) const {
  return mem_.bytes_ptr((static_cast<size_t>(l) * layer_stride() + static_cast<size_t>(first_slot) * slot_stride()) *
                        model_dtype_bytes(dtype_));
}

CacheWords TargetCache::words(int first_slot) const {
  const int el = model_dtype_bytes(dtype_);
  CacheWords w;
  w.cache = static_cast<uint32_t*>(layer(0, first_slot));
  w.layers = layers_;
  w.row_words = row_ * el / 4;
  w.row_stride = w.row_words;
  w.batch_stride = slot_stride() * el / 4;
  w.layer_stride = layer_stride() * el / 4;
  return w;
}

size_t DrafterCache::bytes_for(const DrafterDims& d, const EngineLimits& l) {
  return size_t{2} * d.layers * l.slots * l.cache_capacity() * d.kv_heads * d.head_dim * model_dtype_bytes(l.dtype);
}

DrafterCache::DrafterCache(const DrafterDims& d, const EngineLimits& l, cudaStream_t stream)
    : layers_(d.layers), slots_(l.slots), capacity_(l.cache_capacity()), row_(d.kv_heads * d.head_dim), dtype_(l.dtype) {
  const size_t bytes = bytes_for(d, l);
  mem_ = DeviceBuffer(bytes, "the drafter's context cache");
  KD_CUDA_CHECK(cudaMemsetAsync(mem_.data(), 0, bytes, stream));
}

void* DrafterCache::keys(int l, int first_slot) const {
  const size_t el = (static_cast<size_t>(2 * l) * slots_ + first_slot) * slot_stride();
  return mem_.bytes_ptr(el * model_dtype_bytes(dtype_));
}

void* DrafterCache::values(int l, int first_slot) const {
  const size_t el = (static_cast<size_t>(2 * l + 1) * slots_ + first_slot) * slot_stride();
  return mem_.bytes_ptr(el * model_dtype_bytes(dtype_));
}

SlotTable::SlotTable(const EngineLimits& l, cudaStream_t stream) : slots_(l.slots) {
  const int out_cap = l.max_tokens + l.max_path() + 1;  // a round may emit a path past max_new: cut on the device
  ArenaLayout layout;
  const size_t ints = sizeof(int32_t) * slots_;
  size_t off_i32[12];
  for (size_t& o : off_i32) o = layout.add(ints);
  const size_t off_out = layout.add(sizeof(int32_t) * slots_ * out_cap);
  const size_t off_stop = layout.add(sizeof(int32_t) * slots_ * kMaxStopIds);
  const size_t off_draw = layout.add(sizeof(uint64_t) * slots_);
  const size_t off_seed = layout.add(sizeof(uint64_t) * slots_);
  const size_t off_temp = layout.add(sizeof(float) * slots_);
  mem_ = DeviceBuffer(layout.total(), "the request slots' state");
  KD_CUDA_CHECK(cudaMemsetAsync(mem_.data(), 0, layout.total(), stream));
  auto i32 = [&](size_t off) { return reinterpret_cast<int32_t*>(mem_.bytes_ptr(off)); };
  state_.cache_len = i32(off_i32[0]);
  state_.drafter_len = i32(off_i32[1]);
  state_.ctx_count = i32(off_i32[2]);
  state_.root_token = i32(off_i32[3]);
  state_.live = i32(off_i32[4]);
  state_.done = i32(off_i32[5]);
  state_.out_count = i32(off_i32[6]);
  state_.max_new = i32(off_i32[7]);
  state_.n_stop = i32(off_i32[8]);
  state_.budget = i32(off_i32[9]);
  state_.round_budget = i32(off_i32[10]);
  state_.ar = i32(off_i32[11]);
  state_.out_tokens = i32(off_out);
  state_.out_cap = out_cap;
  state_.stop_ids = i32(off_stop);
  state_.draw = reinterpret_cast<uint64_t*>(mem_.bytes_ptr(off_draw));
  seed_ = reinterpret_cast<uint64_t*>(mem_.bytes_ptr(off_seed));
  temperature_ = reinterpret_cast<float*>(mem_.bytes_ptr(off_temp));
}

SlotState SlotTable::at(int f) const {
  SlotState s = state_;
  for (int32_t** field : {&s.cache_len, &s.drafter_len, &s.ctx_count, &s.root_token, &s.live, &s.done, &s.out_count,
                          &s.max_new, &s.n_stop, &s.budget, &s.round_budget, &s.ar})
    *field += f;
  s.out_tokens += static_cast<int64_t>(f) * s.out_cap;
  s.stop_ids += f * kMaxStopIds;
  s.draw += f;
  return s;
}

void SlotTable::set(int32_t* field, int slot, int32_t value, cudaStream_t stream) const {
  KD_CUDA_CHECK(cudaMemcpyAsync(field + slot, &value, sizeof value, cudaMemcpyHostToDevice, stream));
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));  // `value` lives on this stack frame
}

}  // namespace kdtree::engine
