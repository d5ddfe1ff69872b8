// Model weights on the device: the plan (which checkpoint tensor goes where, with which
// shape and type), the check of the caller's tensor table against it, and the parallel
// load from the safetensors files straight into one device allocation.
//
// Experts are stacked per layer ([E, out, in], expert e at e * out * in) so the grouped GEMM
// takes one base pointer; kv_b_proj stays whole (w_kc / w_vc are strided views of it).
// Weights are stored in the compute dtype, except the router (gate.weight and
// e_score_correction_bias), which stays float32 as in transformers.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/device_memory.h"
#include "engine/kdtree_engine.h"
#include "engine/model_config.h"

namespace kdtree::engine {

// Which part of a checkpoint tensor a slot holds (a model split over GPUs): `count` rows
// (dim 0) or columns (dim 1) from `begin`; dim < 0: the whole tensor.
struct TensorPart {
  int dim = -1;
  int64_t begin = 0, count = 0;
};

// A tensor of a fused matrix (add_rows), whole or a part.
struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;  // the checkpoint tensor's shape
  TensorPart part = {};
};

struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;         // as held on this GPU
  std::vector<int64_t> source_shape;  // as stored in the checkpoint
  TensorPart part;
  bool float32 = false;  // stored as float32 whatever the compute dtype
  size_t offset = 0;     // in the weight allocation
  size_t bytes = 0;
  // An INT4 expert projection [n, k] is filled from two checkpoint tensors, `module`
  // .weight_packed and .weight_scale: repacked into moe_gemm_w4a16's tiles (bf16 compute), or
  // dequantized to float32 exactly as the reference does (float32 compute).
  bool int4 = false;
  std::string module;
  int64_t n = 0, k = 0;
};

class WeightPlan {
 public:
  explicit WeightPlan(ModelDType dtype) : dtype_(dtype) {}
  // A tensor of its own (256-byte aligned); `shape` is the checkpoint's, `part` what is kept.
  void add(const std::string& name, std::vector<int64_t> shape, bool float32 = false, TensorPart part = {});
  // `count` tensors of one shape back to back: name_of(i) at base + i * bytes.
  void add_stack(const std::vector<std::string>& names, std::vector<int64_t> shape);
  // Matrices [rows_i, in] of one input width back to back, so together they are one
  // [sum rows_i, in] matrix: one GEMM computes every projection of the same input.
  void add_rows(const std::vector<PlannedTensor>& parts);
  // INT4 expert projections [n, k] of the given modules back to back: in bf16 compute
  // "<module>.weight_packed" in W4A16 tiles (moe_w4a16_expert_words apart), in float32
  // "<module>.weight" dequantized ([n, k] float32, like add_stack).
  void add_int4_stack(const std::vector<std::string>& modules, int64_t n, int64_t k);
  const std::vector<WeightSlot>& slots() const { return slots_; }
  size_t total_bytes() const { return layout_.total(); }
  ModelDType dtype() const { return dtype_; }

 private:
  size_t element_bytes(bool float32) const { return float32 ? 4 : static_cast<size_t>(model_dtype_bytes(dtype_)); }
  ModelDType dtype_;
  std::vector<WeightSlot> slots_;
  ArenaLayout layout_;
};

// The plans of the two models (names as in kdtree_engine.h); the target's holds this
// rank's part when t.world > 1.
void plan_target_weights(const TargetDims& t, WeightPlan* plan);
void plan_drafter_weights(const DrafterDims& d, WeightPlan* plan);

struct LoadOptions {
  int threads = 4;
  kd_progress_fn progress = nullptr;
  void* progress_user = nullptr;
};

// The loaded weights: one allocation, and every tensor's device address by name.
class DeviceWeights {
 public:
  const void* get(const std::string& name) const;  // throws KD_INTERNAL for a name not planned
  const void* find(const std::string& name) const;  // nullptr when absent
  size_t bytes() const { return memory_.size(); }

  // Checks the table against the plan (names, types, shapes, byte counts, file sizes), then
  // allocates and reads. Every failure is a KD_LOAD_ERROR naming the tensor and its file;
  // nothing stays allocated.
  static DeviceWeights load(const WeightPlan& plan, const kd_tensor_entry* entries, int n_entries,
                            const LoadOptions& options);
  // Every planned weight made on the device from `seed`, no files (kd_load_format
  // KD_LOAD_DUMMY): matrices uniform in +-1/sqrt(fan-in), vectors (norms, biases) near 1, INT4
  // experts a few distinct random experts repeated through each stack, in the layout the
  // W4A16 kernel reads. For timing and memory: tokens from these weights mean nothing.
  static DeviceWeights dummy(const WeightPlan& plan, uint64_t seed, const LoadOptions& options);

 private:
  DeviceBuffer memory_;
  std::unordered_map<std::string, void*> by_name_;
};

}  // namespace kdtree::engine
