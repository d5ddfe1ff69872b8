// Grouped expert GEMM kernel (API: moe_gemm.cuh). CTA = (64 output features, one expert);
// it walks its expert's rows 16 at a time, staging x and W chunks of 32 in shared memory as
// float32. Thread t owns output column t % 64 of rows 4 * (t / 64) .. +3.
// The memory-bound decode case reads each weight once; tensor cores come later (Kimi's
// INT4 experts take moe_gemm_w4a16.cu instead).
#include "moe_gemm.cuh"

namespace kdtree {
namespace kern {

constexpr int kMoeTileRows = 16;   // grouped rows per tile
constexpr int kMoeTileN = 64;      // output features per CTA
constexpr int kMoeTileK = 32;      // input features per staged chunk
constexpr int kMoeThreads = 256;   // kMoeTileN columns x 4 row groups
constexpr int kMoeRowsPerThread = kMoeTileRows / (kMoeThreads / kMoeTileN);

template <class T, bool kSwiglu>
__global__ void __launch_bounds__(kMoeThreads) moe_gemm_kernel(const MoeGemmParams p) {
  __shared__ float xs[kMoeTileRows][kMoeTileK + 1];
  __shared__ float ws[kMoeTileN][kMoeTileK + 1];  // +1: column reads across lanes hit distinct banks
  __shared__ float us[kSwiglu ? kMoeTileN : 1][kMoeTileK + 1];
  const int e = static_cast<int>(blockIdx.y);
  const int n0 = static_cast<int>(blockIdx.x) * kMoeTileN;
  const int row_begin = p.offsets[e], row_end = p.offsets[e + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int col = tid % kMoeTileN, rg = tid / kMoeTileN;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w) + static_cast<int64_t>(e) * p.w_expert_stride;
  const T* u = kSwiglu ? static_cast<const T*>(p.w_up) + static_cast<int64_t>(e) * p.w_expert_stride : nullptr;
  for (int r0 = row_begin; r0 < row_end; r0 += kMoeTileRows) {
    float acc[kMoeRowsPerThread] = {}, acc_u[kMoeRowsPerThread] = {};
    for (int k0 = 0; k0 < p.k; k0 += kMoeTileK) {
      for (int i = tid; i < kMoeTileRows * kMoeTileK; i += kMoeThreads) {
        const int rr = i / kMoeTileK, kk = i % kMoeTileK;
        const int r = r0 + rr;
        float v = 0.0f;
        if (r < row_end && k0 + kk < p.k) {
          const int src = p.x_row ? p.x_row[r] : r;
          v = to_f32(x[static_cast<int64_t>(src) * p.x_stride + k0 + kk]);
        }
        xs[rr][kk] = v;
      }
      for (int i = tid; i < kMoeTileN * kMoeTileK; i += kMoeThreads) {
        const int cc = i / kMoeTileK, kk = i % kMoeTileK;
        const bool ok = n0 + cc < p.n && k0 + kk < p.k;
        const int64_t off = static_cast<int64_t>(n0 + cc) * p.k + k0 + kk;
        ws[cc][kk] = ok ? to_f32(w[off]) : 0.0f;
        if (kSwiglu) us[cc][kk] = ok ? to_f32(u[off]) : 0.0f;
      }
      __syncthreads();
#pragma unroll 4
      for (int kk = 0; kk < kMoeTileK; ++kk) {
        const float wv = ws[col][kk];
        const float uv = kSwiglu ? us[col][kk] : 0.0f;
        for (int j = 0; j < kMoeRowsPerThread; ++j) {
          const float xv = xs[rg * kMoeRowsPerThread + j][kk];
          acc[j] += xv * wv;
          if (kSwiglu) acc_u[j] += xv * uv;
        }
      }
      __syncthreads();
    }
    if (n0 + col < p.n) {
      for (int j = 0; j < kMoeRowsPerThread; ++j) {
        const int r = r0 + rg * kMoeRowsPerThread + j;
        if (r >= row_end) break;
        float v;
        if (kSwiglu) {
          const float g = round_to<T>(acc[j]);
          v = round_to<T>(g / (1.0f + expf(-g))) * round_to<T>(acc_u[j]);
        } else {
          v = acc[j];
        }
        static_cast<T*>(p.out)[static_cast<int64_t>(r) * p.out_stride + n0 + col] = from_f32<T>(v);
      }
    }
  }
}

template <class T>
void launch_moe_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  const dim3 grid(ceil_div(p.n, kMoeTileN), p.experts);
  if (p.w_up) {
    auto* kernel = moe_gemm_kernel<T, true>;
    KD_LAUNCH(kernel, grid, kMoeThreads, 0, stream, p);
  } else {
    auto* kernel = moe_gemm_kernel<T, false>;
    KD_LAUNCH(kernel, grid, kMoeThreads, 0, stream, p);
  }
}

}  // namespace kern

KernelResult moe_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (KernelResult r = check_moe_gemm_params(p); !r.ok()) return r;
  if (p.rows == 0) return KernelResult::success();
  if (p.experts > 65535) return KernelResult::over_limit("moe_gemm: more than 65535 experts (grid.y)");
  KD_DISPATCH_DTYPE(p.dtype, T, kern::launch_moe_gemm<T>(p, stream));
  return launch_status("moe_gemm_kernel launch");
}

}  // namespace kdtree
