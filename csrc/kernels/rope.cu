// Rotary embedding kernel (API: rope.cuh): one thread per (token, head, pair).
#include "rope.cuh"
#include "rope_math.cuh"

namespace kdtree {
namespace kern {

template <class T>
__global__ void __launch_bounds__(kElementThreads) rope_kernel(const RopeParams p) {
  const int half = p.dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.tokens) * p.heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int64_t th = idx / half;
  const int t = static_cast<int>(th / p.heads), h = static_cast<int>(th % p.heads);
  const T* x = static_cast<const T*>(p.x) + t * p.x_token_stride + h * p.x_head_stride;
  T* out = static_cast<T*>(p.out) + t * p.out_token_stride + h * p.out_head_stride;
  float c, s;
  rope_cos_sin<T>(p.positions[t], p.inv_freq[i], p.attention_factor, &c, &s);
  rope_pair(x, out, i, p.dim, p.interleave, c, s);
}

}  // namespace kern

KernelResult rope(const RopeParams& p, cudaStream_t stream) {
  if (KernelResult r = check_rope_params(p); !r.ok()) return r;
  const int64_t work = static_cast<int64_t>(p.tokens) * p.heads * (p.dim / 2);
  if (work == 0) return KernelResult::success();
  const int blocks = static_cast<int>(kern::ceil_div<int64_t>(work, kern::kElementThreads));
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::rope_kernel<T>, blocks, kern::kElementThreads, 0, stream, p));
  return launch_status("rope_kernel launch");
}

}  // namespace kdtree
