// DFlash block attention kernel (API: drafter_attn.cuh). CTA = (head, request), 4 warps;
// keys in tiles of 32 (one lane per key in the softmax update).
#include "block_scan.cuh"
#include "drafter_attn.cuh"
#include "launch_support.h"

namespace kdtree {
namespace kern {

constexpr int kDrafterThreads = 128;
constexpr int kDrafterWarps = kDrafterThreads / kWarpSize;
constexpr int kDrafterKeyTile = kWarpSize;

struct DrafterSmem {  // offsets (floats) into dynamic shared memory
  int q, o, k, v, s, m, l, alpha, total;
};
KD_HOST_DEVICE inline DrafterSmem drafter_smem_layout(int q_len, int hd) {
  DrafterSmem L;
  const int kpad = hd + 1;  // score reads walk k rows across lanes: pad against bank conflicts
  L.q = 0;
  L.o = L.q + q_len * hd;
  L.k = L.o + q_len * hd;
  L.v = L.k + kDrafterKeyTile * kpad;
  L.s = L.v + kDrafterKeyTile * hd;
  L.m = L.s + q_len * kDrafterKeyTile;
  L.l = L.m + q_len;
  L.alpha = L.l + q_len;
  L.total = L.alpha + q_len;
  return L;
}

template <class T>
__global__ void __launch_bounds__(kDrafterThreads) drafter_attn_kernel(const DrafterAttnParams p) {
  KD_DYNAMIC_SMEM(float, sm);
  const int h = static_cast<int>(blockIdx.x), b = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int hd = p.head_dim, ql = p.q_len, g = h / (p.heads / p.kv_heads);
  const DrafterSmem L = drafter_smem_layout(ql, hd);
  float *qs = sm + L.q, *os = sm + L.o, *ks = sm + L.k, *vs = sm + L.v, *ss = sm + L.s;
  float *ms = sm + L.m, *ls = sm + L.l, *as = sm + L.alpha;
  const int kpad = hd + 1;
  const T* q = static_cast<const T*>(p.q);
  const int64_t q_stride = p.q_stride ? p.q_stride : static_cast<int64_t>(p.heads) * hd;
  const int64_t blk_stride = p.blk_stride ? p.blk_stride : static_cast<int64_t>(p.kv_heads) * hd;
  for (int i = tid; i < ql * hd; i += kDrafterThreads) {
    const int t = i / hd, d = i % hd;
    qs[i] = to_f32(q[(static_cast<int64_t>(b) * ql + t) * q_stride + h * hd + d]) * p.scale;
    os[i] = 0.0f;
  }
  for (int t = tid; t < ql; t += kDrafterThreads) {
    ms[t] = -__builtin_huge_valf();
    ls[t] = 0.0f;
  }
  const int ctx = p.ctx_len[b];
  const int total = ctx + ql;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * hd;
  for (int j0 = 0; j0 < total; j0 += kDrafterKeyTile) {
    const int nk = total - j0 < kDrafterKeyTile ? total - j0 : kDrafterKeyTile;
    __syncthreads();  // the previous tile's readers are done
    for (int i = tid; i < nk * hd; i += kDrafterThreads) {
      const int jj = i / hd, d = i % hd, j = j0 + jj;
      const T *kp, *vp;
      if (j < ctx) {
        const int64_t off = static_cast<int64_t>(b) * p.ctx_batch_stride + j * kv_row + g * hd + d;
        kp = static_cast<const T*>(p.ctx_k) + off;
        vp = static_cast<const T*>(p.ctx_v) + off;
      } else {
        const int64_t off = (static_cast<int64_t>(b) * ql + (j - ctx)) * blk_stride + g * hd + d;
        kp = static_cast<const T*>(p.blk_k) + off;
        vp = static_cast<const T*>(p.blk_v) + off;
      }
      ks[jj * kpad + d] = to_f32(*kp);
      vs[jj * hd + d] = to_f32(*vp);
    }
    __syncthreads();
    for (int i = tid; i < ql * kDrafterKeyTile; i += kDrafterThreads) {
      const int t = i / kDrafterKeyTile, jj = i % kDrafterKeyTile;
      float acc = -__builtin_huge_valf();
      if (jj < nk) {
        acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc += qs[t * hd + d] * ks[jj * kpad + d];
      }
      ss[i] = acc;
    }
    __syncthreads();
    for (int t = warp; t < ql; t += kDrafterWarps) {  // online softmax, one lane per key
      const float sc = ss[t * kDrafterKeyTile + lane];
      const float m_old = ms[t];
      const float m_new = fmaxf(m_old, warp_max(sc));
      const float pr = sc == -__builtin_huge_valf() ? 0.0f : expf(sc - m_new);
      const float alpha = m_old == -__builtin_huge_valf() ? 0.0f : expf(m_old - m_new);
      const float sum = warp_sum(pr);
      ss[t * kDrafterKeyTile + lane] = pr;
      if (lane == 0) {
        ms[t] = m_new;
        ls[t] = ls[t] * alpha + sum;
        as[t] = alpha;
      }
    }
    __syncthreads();
    for (int i = tid; i < ql * hd; i += kDrafterThreads) {
      const int t = i / hd, d = i % hd;
      float acc = os[i] * as[t];
      for (int jj = 0; jj < nk; ++jj) acc += ss[t * kDrafterKeyTile + jj] * vs[jj * hd + d];
      os[i] = acc;
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out);
  for (int i = tid; i < ql * hd; i += kDrafterThreads) {
    const int t = i / hd, d = i % hd;
    out[((static_cast<int64_t>(b) * ql + t) * p.heads + h) * hd + d] = from_f32<T>(os[i] / ls[t]);
  }
}

}  // namespace kern

size_t drafter_attn_smem_bytes(int q_len, int head_dim) {
  return sizeof(float) * static_cast<size_t>(kern::drafter_smem_layout(q_len, head_dim).total);
}

KernelResult drafter_attn(const DrafterAttnParams& p, cudaStream_t stream) {
  if (KernelResult r = check_drafter_attn_params(p); !r.ok()) return r;
  if (p.batch == 0) return KernelResult::success();
  if (p.batch > 65535) return KernelResult::over_limit("drafter_attn: batch over 65535 (grid.y)");
  const size_t smem = drafter_attn_smem_bytes(p.q_len, p.head_dim);
  KernelResult result = KernelResult::success();
  KD_DISPATCH_DTYPE(p.dtype, T, {
    auto* kernel = kern::drafter_attn_kernel<T>;
    result = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem, "drafter_attn");
    if (result.ok()) KD_LAUNCH(kernel, dim3(p.heads, p.batch), kern::kDrafterThreads, smem, stream, p);
  });
  if (!result.ok()) return result;
  return launch_status("drafter_attn_kernel launch");
}

}  // namespace kdtree
