// MLA cache write kernel (API: mla_cache.cuh): one warp per new token row.
#include "block_scan.cuh"
#include "mla_cache.cuh"
#include "rope_math.cuh"

namespace kdtree {
namespace kern {

template <class T>
__global__ void __launch_bounds__(kRowThreads) mla_cache_write_kernel(const MlaCacheWriteParams p) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int row = static_cast<int>(blockIdx.x) * kRowWarps + warp;
  if (row >= p.batch * p.tokens) return;
  const int b = row / p.tokens, t = row % p.tokens;
  const int dst_row = p.cache_len[b] + t;
  if (dst_row < 0 || dst_row >= p.capacity) return;
  const T* src = static_cast<const T*>(p.kv_a) + row * p.kv_a_stride;
  const T* w = static_cast<const T*>(p.norm_weight);
  T* dst = static_cast<T*>(p.cache) + b * p.batch_stride + dst_row * p.row_stride;
  float ss = 0.0f;
  for (int i = lane; i < p.kv_lora; i += kWarpSize) {
    const float v = to_f32(src[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(p.kv_lora) + p.eps);
  for (int i = lane; i < p.kv_lora; i += kWarpSize) dst[i] = from_f32<T>(round_to<T>(to_f32(src[i]) * rs) * to_f32(w[i]));
  const int pos = p.positions[row];
  for (int i = lane; i < p.rope_dim / 2; i += kWarpSize) {
    float c, s;
    rope_cos_sin<T>(pos, p.inv_freq[i], p.attention_factor, &c, &s);
    rope_pair(src + p.kv_lora, dst + kVerifyLatentDim, i, p.rope_dim, p.interleave, c, s);
  }
}

}  // namespace kern

KernelResult mla_cache_write(const MlaCacheWriteParams& p, cudaStream_t stream) {
  if (KernelResult r = check_mla_cache_write_params(p); !r.ok()) return r;
  const int rows = p.batch * p.tokens;
  if (rows == 0) return KernelResult::success();
  const int blocks = kern::ceil_div(rows, kern::kRowWarps);
  KD_DISPATCH_DTYPE(p.dtype, T,
                    KD_LAUNCH(kern::mla_cache_write_kernel<T>, blocks, kern::kRowThreads, 0, stream, p));
  return launch_status("mla_cache_write_kernel launch");
}

}  // namespace kdtree
