// Element types of the model kernels (csrc/kernels/{norm,rope,mla_cache,elementwise,moe_*,
// drafter_attn,sampling}): float32 (the exactness mode) or bf16 (the fast mode), always
// computed in float32 and rounded once where the torch reference rounds
// (python_engine/model/ops.py: RMSNorm rounds the normalised value, then the product with
// the weight).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device_compat.cuh"
#include "kernel_status.h"
#include "launch_support.h"

namespace kdtree {

// The activation / weight type of a model kernel launch.
enum class ModelDType : int { kF32 = 0, kBF16 = 1 };

inline int model_dtype_bytes(ModelDType t) { return t == ModelDType::kF32 ? 4 : 2; }
inline const char* model_dtype_name(ModelDType t) { return t == ModelDType::kF32 ? "float32" : "bfloat16"; }

namespace kern {

template <class T>
KD_DEVICE float to_f32(T v);
template <>
KD_DEVICE float to_f32<float>(float v) { return v; }
template <>
KD_DEVICE float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
KD_DEVICE T from_f32(float v);
template <>
KD_DEVICE float from_f32<float>(float v) { return v; }
template <>
KD_DEVICE __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// v rounded to T and back: where the reference stores an intermediate in the model dtype
template <class T>
KD_DEVICE float round_to(float v) { return to_f32<T>(from_f32<T>(v)); }

// Threads per block of the one-warp-per-row kernels, and the rows one block takes.
constexpr int kRowWarps = 4;
constexpr int kRowThreads = kRowWarps * kWarpSize;
// Threads per block of the element-wise kernels.
constexpr int kElementThreads = 256;

}  // namespace kern

// Dispatch a launcher template on the element type: DISPATCH(dtype, T, body).
#define KD_DISPATCH_DTYPE(dtype, T, ...)                 \
  do {                                                   \
    if ((dtype) == ::kdtree::ModelDType::kF32) {         \
      using T = float;                                   \
      __VA_ARGS__;                                       \
    } else {                                             \
      using T = __nv_bfloat16;                           \
      __VA_ARGS__;                                       \
    }                                                    \
  } while (0)

}  // namespace kdtree
