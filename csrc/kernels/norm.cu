// RMSNorm kernels (API: norm.cuh): one warp per row, float32 sum of squares.
#include "block_scan.cuh"
#include "model_dtype.cuh"
#include "norm.cuh"

namespace kdtree {
namespace kern {

template <class T>
__global__ void __launch_bounds__(kRowThreads) rms_norm_kernel(const RmsNormParams p) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int vec = static_cast<int>(blockIdx.x) * kRowWarps + warp;  // one (row, head) vector per warp
  if (vec >= p.rows * p.heads) return;  // whole warps leave together: no collective below is partial
  const int row = vec / p.heads, head = vec % p.heads;
  const T* x = static_cast<const T*>(p.x) + row * p.x_stride + head * p.x_head_stride;
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + row * p.out_stride + head * p.out_head_stride;
  float ss = 0.0f;
  for (int i = lane; i < p.dim; i += kWarpSize) {
    const float v = to_f32(x[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(p.dim) + p.eps);
  for (int i = lane; i < p.dim; i += kWarpSize)
    out[i] = from_f32<T>(round_to<T>(to_f32(x[i]) * rs) * to_f32(w[i]));
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) add_rms_norm_kernel(const AddRmsNormParams p) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int row = static_cast<int>(blockIdx.x) * kRowWarps + warp;
  if (row >= p.rows) return;
  T* x = static_cast<T*>(p.x) + row * p.x_stride;
  const T* y = static_cast<const T*>(p.y) + row * p.y_stride;
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + row * p.out_stride;
  float ss = 0.0f;
  for (int i = lane; i < p.dim; i += kWarpSize) {
    const float v = round_to<T>(to_f32(x[i]) + to_f32(y[i]));
    x[i] = from_f32<T>(v);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(p.dim) + p.eps);
  for (int i = lane; i < p.dim; i += kWarpSize)  // each lane rereads only what it wrote
    out[i] = from_f32<T>(round_to<T>(to_f32(x[i]) * rs) * to_f32(w[i]));
}

}  // namespace kern

KernelResult add_rms_norm(const AddRmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || p.x_stride < p.dim || p.y_stride < p.dim || p.out_stride < p.dim)
    return KernelResult::invalid("add_rms_norm: bad rows, dim or strides");
  if (!(p.eps > 0.0f)) return KernelResult::invalid("add_rms_norm: eps must be a positive number");
  if (p.rows == 0) return KernelResult::success();
  if (!p.x || !p.y || !p.weight || !p.out || p.out == p.x)
    return KernelResult::invalid("add_rms_norm: x, y, weight and out must be non-null, out distinct from x");
  const int blocks = kern::ceil_div(p.rows, kern::kRowWarps);
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH(kern::add_rms_norm_kernel<T>, blocks, kern::kRowThreads, 0, stream, p));
  return launch_status("add_rms_norm_kernel launch");
}

KernelResult rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rms_norm_params(p); !r.ok()) return r;
  if (p.rows == 0) return KernelResult::success();
  const int blocks = kern::ceil_div(p.rows * p.heads, kern::kRowWarps);
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH(kern::rms_norm_kernel<T>, blocks, kern::kRowThreads, 0, stream, p));
  return launch_status("rms_norm_kernel launch");
}

}  // namespace kdtree
