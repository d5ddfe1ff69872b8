// Element-wise model kernels (API: elementwise.cuh): one thread per element, no barriers.
#include "elementwise.cuh"

namespace kdtree {
namespace kern {

// The (row, col) of flat element idx, or false past the end.
KD_DEVICE bool element_of(int rows, int cols, int* r, int* c) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(rows) * cols) return false;
  *r = static_cast<int>(idx / cols);
  *c = static_cast<int>(idx % cols);
  return true;
}

template <class T>
__global__ void __launch_bounds__(kElementThreads) embed_kernel(const EmbedParams p) {
  int r, c;
  if (!element_of(p.rows, p.dim, &r, &c)) return;
  const int id = p.ids[r];
  T* out = static_cast<T*>(p.out) + r * p.out_stride + c;
  if (id < 0 || id >= p.vocab) {
    *out = from_f32<T>(0.0f);
    return;
  }
  const T v = static_cast<const T*>(p.table)[static_cast<int64_t>(id) * p.dim + c];
  *out = p.scale == 1.0f ? v : from_f32<T>(to_f32(v) * p.scale);
}

template <class T>
__global__ void __launch_bounds__(kElementThreads) add_kernel(const AddParams p) {
  int r, c;
  if (!element_of(p.rows, p.dim, &r, &c)) return;
  T* x = static_cast<T*>(p.x) + r * p.x_stride + c;
  *x = from_f32<T>(to_f32(*x) + to_f32(static_cast<const T*>(p.y)[r * p.y_stride + c]));
}

template <class T>
__global__ void __launch_bounds__(kElementThreads) silu_mul_kernel(const SiluMulParams p) {
  int r, c;
  if (!element_of(p.rows, p.dim, &r, &c)) return;
  const float g = to_f32(static_cast<const T*>(p.gate)[r * p.gate_stride + c]);
  const float u = to_f32(static_cast<const T*>(p.up)[r * p.up_stride + c]);
  const float act = round_to<T>(g / (1.0f + expf(-g)));
  static_cast<T*>(p.out)[r * p.out_stride + c] = from_f32<T>(act * u);
}

template <class In, class Out>
__global__ void __launch_bounds__(kElementThreads) copy_rows_kernel(const CopyRowsParams p) {
  int r, c;
  if (!element_of(p.rows, p.cols, &r, &c)) return;
  const int src = p.index ? p.index[r] : r;
  const int dst = p.out_index ? p.out_index[r] : r;
  if (dst < 0) return;
  Out* out = static_cast<Out*>(p.out) + static_cast<int64_t>(dst) * p.out_stride + c;
  *out = src < 0 ? from_f32<Out>(0.0f) : from_f32<Out>(to_f32(static_cast<const In*>(p.in)[static_cast<int64_t>(src) * p.in_stride + c]));
}

__global__ void __launch_bounds__(kElementThreads) logits_transform_kernel(const LogitsTransformParams p) {
  int r, c;
  if (!element_of(p.rows, p.cols, &r, &c)) return;
  float* l = p.logits + r * p.stride + c;
  float v = *l * p.multiplier;
  if (p.softcap > 0.0f) v = tanhf(v / p.softcap) * p.softcap;
  *l = v;
}

template <class T>
__global__ void __launch_bounds__(kElementThreads) sum_ranks_kernel(const SumRanksParams p) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= p.count) return;
  float acc = 0.0f;
  for (int r = 0; r < p.ranks; ++r) acc += to_f32(static_cast<const T*>(p.src[r])[j]);
  for (int r = 0; r < p.ranks; ++r) static_cast<T*>(p.dst[r])[j] = from_f32<T>(acc);
}

inline int element_blocks(int rows, int cols) {
  return static_cast<int>(ceil_div<int64_t>(static_cast<int64_t>(rows) * cols, kElementThreads));
}

template <class In, class Out>
void launch_copy_rows(const CopyRowsParams& p, cudaStream_t stream) {
  auto* kernel = copy_rows_kernel<In, Out>;  // a pointer: the template's comma stays out of the macro
  KD_LAUNCH_FLAT(kernel, element_blocks(p.rows, p.cols), kElementThreads, 0, stream, p);
}

}  // namespace kern

KernelResult embed(const EmbedParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rows_cols("embed", p.rows, p.dim, {p.out_stride}, {p.ids, p.table, p.out}); !r.ok())
    return r;
  if (p.rows * p.dim == 0) return KernelResult::success();
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::embed_kernel<T>, kern::element_blocks(p.rows, p.dim),
                                               kern::kElementThreads, 0, stream, p));
  return launch_status("embed_kernel launch");
}

KernelResult logits_transform(const LogitsTransformParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rows_cols("logits_transform", p.rows, p.cols, {p.stride}, {p.logits}); !r.ok()) return r;
  if (p.rows * p.cols == 0 || (p.multiplier == 1.0f && p.softcap == 0.0f)) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::logits_transform_kernel, kern::element_blocks(p.rows, p.cols), kern::kElementThreads, 0,
                 stream, p);
  return launch_status("logits_transform_kernel launch");
}

KernelResult add_inplace(const AddParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rows_cols("add_inplace", p.rows, p.dim, {p.x_stride, p.y_stride}, {p.x, p.y}); !r.ok())
    return r;
  if (p.rows * p.dim == 0) return KernelResult::success();
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::add_kernel<T>, kern::element_blocks(p.rows, p.dim),
                                               kern::kElementThreads, 0, stream, p));
  return launch_status("add_kernel launch");
}

KernelResult silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rows_cols("silu_mul", p.rows, p.dim, {p.gate_stride, p.up_stride, p.out_stride},
                                       {p.gate, p.up, p.out});
      !r.ok())
    return r;
  if (p.rows * p.dim == 0) return KernelResult::success();
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::silu_mul_kernel<T>, kern::element_blocks(p.rows, p.dim),
                                               kern::kElementThreads, 0, stream, p));
  return launch_status("silu_mul_kernel launch");
}

KernelResult copy_rows(const CopyRowsParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rows_cols("copy_rows", p.rows, p.cols, {p.in_stride, p.out_stride}, {p.in, p.out}); !r.ok())
    return r;
  if (p.rows * p.cols == 0) return KernelResult::success();
  KD_DISPATCH_DTYPE(p.in_dtype, In, KD_DISPATCH_DTYPE(p.out_dtype, Out, kern::launch_copy_rows<In, Out>(p, stream)));
  return launch_status("copy_rows_kernel launch");
}

KernelResult sum_ranks(const SumRanksParams& p, cudaStream_t stream) {
  if (p.ranks < 1 || p.ranks > kSumRanksMax || p.count < 0)
    return KernelResult::invalid("sum_ranks: ranks " + std::to_string(p.ranks) + " outside 1.." +
                                 std::to_string(kSumRanksMax) + " or a negative count");
  for (int r = 0; r < p.ranks; ++r)
    if (!p.src[r] || !p.dst[r]) return KernelResult::invalid("sum_ranks: a null buffer");
  if (p.count == 0) return KernelResult::success();
  const int blocks = static_cast<int>(kern::ceil_div<int64_t>(p.count, kern::kElementThreads));
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::sum_ranks_kernel<T>, blocks, kern::kElementThreads, 0, stream, p));
  return launch_status("sum_ranks_kernel launch");
}

}  // namespace kdtree
