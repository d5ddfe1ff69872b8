// DFlash block attention kernels (API and plan rules: drafter_attn.cuh). Attention CTA =
// (row tile x kv head, request, key split), 8 warps; keys in tiles of kDrafterKeyTile (one
// lane per key in the softmax update). Merge CTA = (query row of every head, request).
#include <algorithm>

#include "block_scan.cuh"
#include "drafter_attn.cuh"
#include "launch_support.h"

namespace kdtree {
namespace kern {

constexpr int kDrafterThreads = 256;
constexpr int kDrafterWarps = kDrafterThreads / kWarpSize;
constexpr int kDrafterMergeThreads = 128;  // one thread a head_dim column (<= 256: two each)

struct DrafterLaunch {
  DrafterAttnParams p;
  int group_rows, tile_rows, splits;
  DrafterWorkspaceLayout ws;
};

template <class T>
__global__ void __launch_bounds__(kDrafterThreads) drafter_attn_kernel(const DrafterLaunch a) {
  const DrafterAttnParams& p = a.p;
  const int b = static_cast<int>(blockIdx.y), split = static_cast<int>(blockIdx.z);
  const int g = static_cast<int>(blockIdx.x) % p.kv_heads, tile = static_cast<int>(blockIdx.x) / p.kv_heads;
  const int ctx = p.ctx_len[b];
  const int ql = p.q_len, total = ctx + ql;
  const DrafterSplitRange range = drafter_active_splits(total, a.splits);
  if (split >= range.active) return;  // this request's keys fill fewer splits (uniform over the CTA)
  const int k_begin = split * range.chunk, k_end = std::min(total, k_begin + range.chunk);

  KD_DYNAMIC_SMEM(char, sm);
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  const int r0 = tile * a.tile_rows, rows = std::min(a.tile_rows, a.group_rows - r0);
  const DrafterSmem L = drafter_smem_layout(a.tile_rows, hd, static_cast<int>(sizeof(T)));
  float* os = reinterpret_cast<float*>(sm + L.o);
  float* ss = reinterpret_cast<float*>(sm + L.s);
  float* ms = reinterpret_cast<float*>(sm + L.m);
  float* ls = reinterpret_cast<float*>(sm + L.l);
  float* as = reinterpret_cast<float*>(sm + L.alpha);
  T* qs = reinterpret_cast<T*>(sm + L.q);
  T* ks = reinterpret_cast<T*>(sm + L.k);
  T* vs = reinterpret_cast<T*>(sm + L.v);
  const int kpad = L.kpad;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarpSize, lane = tid % kWarpSize;
  const T* q = static_cast<const T*>(p.q);
  const int64_t q_stride = p.q_stride ? p.q_stride : static_cast<int64_t>(p.heads) * hd;
  const int64_t blk_stride = p.blk_stride ? p.blk_stride : static_cast<int64_t>(p.kv_heads) * hd;
  // group row r = head-in-group * q_len + t: head g * group + r / q_len, block query r % q_len
  for (int i = tid; i < rows * hd; i += kDrafterThreads) {
    const int r = r0 + i / hd, d = i % hd;
    const int head = g * group + r / ql, t = r % ql;
    qs[i] = q[(static_cast<int64_t>(b) * ql + t) * q_stride + static_cast<int64_t>(head) * hd + d];
    os[i] = 0.0f;
  }
  for (int r = tid; r < rows; r += kDrafterThreads) {
    ms[r] = -__builtin_huge_valf();
    ls[r] = 0.0f;
  }
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * hd;
  for (int j0 = k_begin; j0 < k_end; j0 += kDrafterKeyTile) {
    const int nk = k_end - j0 < kDrafterKeyTile ? k_end - j0 : kDrafterKeyTile;
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
      ks[jj * kpad + d] = *kp;
      vs[jj * hd + d] = *vp;
    }
    __syncthreads();
    for (int i = tid; i < rows * kDrafterKeyTile; i += kDrafterThreads) {
      const int r = i / kDrafterKeyTile, jj = i % kDrafterKeyTile;
      float acc = -__builtin_huge_valf();
      if (jj < nk) {
        acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc += to_f32(qs[r * hd + d]) * p.scale * to_f32(ks[jj * kpad + d]);
      }
      ss[i] = acc;
    }
    __syncthreads();
    for (int r = warp; r < rows; r += kDrafterWarps) {  // online softmax, one lane per key
      const float sc = ss[r * kDrafterKeyTile + lane];
      const float m_old = ms[r];
      const float m_new = fmaxf(m_old, warp_max(sc));
      const float pr = sc == -__builtin_huge_valf() ? 0.0f : expf(sc - m_new);
      const float alpha = m_old == -__builtin_huge_valf() ? 0.0f : expf(m_old - m_new);
      const float sum = warp_sum(pr);
      ss[r * kDrafterKeyTile + lane] = pr;
      if (lane == 0) {
        ms[r] = m_new;
        ls[r] = ls[r] * alpha + sum;
        as[r] = alpha;
      }
    }
    __syncthreads();
    for (int i = tid; i < rows * hd; i += kDrafterThreads) {
      const int r = i / hd, d = i % hd;
      float acc = os[i] * as[r];
      for (int jj = 0; jj < nk; ++jj) acc += ss[r * kDrafterKeyTile + jj] * to_f32(vs[jj * hd + d]);
      os[i] = acc;
    }
  }
  __syncthreads();
  if (range.active == 1) {  // the whole softmax is here: the output, normalised
    T* out = static_cast<T*>(p.out);
    for (int i = tid; i < rows * hd; i += kDrafterThreads) {
      const int r = r0 + i / hd, d = i % hd;
      const int head = g * group + r / ql, t = r % ql;
      out[((static_cast<int64_t>(b) * ql + t) * p.heads + head) * hd + d] = from_f32<T>(os[i] / ls[i / hd]);
    }
    return;
  }
  // a partial: unnormalised o with its max and sum, merged by drafter_merge_kernel
  char* ws = static_cast<char*>(p.workspace);
  const int64_t part_row = ((static_cast<int64_t>(b) * p.kv_heads + g) * a.splits + split) * a.group_rows + r0;
  float* po = reinterpret_cast<float*>(ws + a.ws.o) + part_row * hd;
  for (int i = tid; i < rows * hd; i += kDrafterThreads) po[i] = os[i];
  float* pm = reinterpret_cast<float*>(ws + a.ws.m) + part_row;
  float* pl = reinterpret_cast<float*>(ws + a.ws.l) + part_row;
  for (int r = tid; r < rows; r += kDrafterThreads) {
    pm[r] = ms[r];
    pl[r] = ls[r];
  }
}

// One output row (request b, head, block query t) from its request's active partials:
// o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s.
template <class T>
__global__ void __launch_bounds__(kDrafterMergeThreads) drafter_merge_kernel(const DrafterLaunch a) {
  const DrafterAttnParams& p = a.p;
  const int b = static_cast<int>(blockIdx.y);
  const int ql = p.q_len, hd = p.head_dim, group = p.heads / p.kv_heads;
  const DrafterSplitRange range = drafter_active_splits(p.ctx_len[b] + ql, a.splits);
  if (range.active == 1) return;  // the attention kernel wrote this request's output
  KD_DYNAMIC_SMEM(float, weight);  // [splits]: e^(m_s - M) / L
  const int row = static_cast<int>(blockIdx.x);  // head * q_len + t over every head
  const int head = row / ql, t = row % ql, g = head / group, r = (head % group) * ql + t;
  const char* ws = static_cast<const char*>(p.workspace);
  const int64_t first = (static_cast<int64_t>(b) * p.kv_heads + g) * a.splits * a.group_rows + r;
  const float* pm = reinterpret_cast<const float*>(ws + a.ws.m) + first;
  const float* pl = reinterpret_cast<const float*>(ws + a.ws.l) + first;
  float m_all = -__builtin_huge_valf();
  for (int s = 0; s < range.active; ++s) m_all = fmaxf(m_all, pm[static_cast<int64_t>(s) * a.group_rows]);
  float l_all = 0.0f;
  for (int s = 0; s < range.active; ++s) {
    const int64_t at = static_cast<int64_t>(s) * a.group_rows;
    l_all += pl[at] * expf(pm[at] - m_all);
  }
  const int tid = static_cast<int>(threadIdx.x);
  for (int s = tid; s < range.active; s += kDrafterMergeThreads)
    weight[s] = expf(pm[static_cast<int64_t>(s) * a.group_rows] - m_all) / l_all;
  __syncthreads();
  const float* po = reinterpret_cast<const float*>(ws + a.ws.o) + first * hd;
  T* out = static_cast<T*>(p.out) + ((static_cast<int64_t>(b) * ql + t) * p.heads + head) * hd;
  for (int d = tid; d < hd; d += kDrafterMergeThreads) {
    float acc = 0.0f;
    for (int s = 0; s < range.active; ++s) acc += weight[s] * po[static_cast<int64_t>(s) * a.group_rows * hd + d];
    out[d] = from_f32<T>(acc);
  }
}

}  // namespace kern

DrafterAttnPlan make_drafter_attn_plan(const DrafterAttnParams& p, int sms) {
  DrafterAttnPlan pl;
  const int el = model_dtype_bytes(p.dtype);
  pl.group_rows = p.heads / p.kv_heads * p.q_len;
  // rows that fit the budget beside one key/value tile, at least one; balanced over the tiles
  const DrafterSmem none = drafter_smem_layout(0, p.head_dim, el);
  const size_t per_row = drafter_smem_layout(1, p.head_dim, el).total - none.total + kDrafterSmemAlign;
  const size_t room = kDrafterSmemBudget > none.total ? kDrafterSmemBudget - none.total : 0;
  const int fit = std::max(1, static_cast<int>(std::min<size_t>(room / per_row, pl.group_rows)));
  pl.row_tiles = kern::ceil_div(pl.group_rows, fit);
  pl.tile_rows = kern::ceil_div(pl.group_rows, pl.row_tiles);
  pl.smem_bytes = drafter_smem_layout(pl.tile_rows, p.head_dim, el).total;
  // splits: enough CTAs for kDrafterCtasPerSm on every SM, no split under kDrafterMinSplitKeys
  // of the longest context
  const int64_t ctas = static_cast<int64_t>(std::max(p.batch, 1)) * p.kv_heads * pl.row_tiles;
  const int64_t want = kern::ceil_div<int64_t>(static_cast<int64_t>(sms) * kDrafterCtasPerSm, ctas);
  const int64_t most = kern::ceil_div<int64_t>(static_cast<int64_t>(p.max_ctx) + p.q_len, kDrafterMinSplitKeys);
  pl.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, kDrafterMaxSplits})));
  if (pl.splits > 1) {
    pl.merge_smem_bytes = sizeof(float) * static_cast<size_t>(pl.splits);
    pl.workspace_bytes =
        drafter_workspace_layout(std::max(p.batch, 1), p.kv_heads, pl.splits, pl.group_rows, p.head_dim).total;
  }
  return pl;
}

KernelResult drafter_attn_plan(const DrafterAttnParams& p, DrafterAttnPlan* plan) {
  if (KernelResult r = check_drafter_attn_sizes(p); !r.ok()) return r;
  DeviceLimits dev;
  if (KernelResult r = current_device_limits(&dev); !r.ok()) return r;
  *plan = make_drafter_attn_plan(p, dev.sms);
  if (plan->smem_bytes > static_cast<size_t>(dev.smem_optin))
    return KernelResult::over_limit("drafter_attn: head_dim " + std::to_string(p.head_dim) + " needs " +
                                    std::to_string(plan->smem_bytes) + " bytes of shared memory, the device allows " +
                                    std::to_string(dev.smem_optin));
  return KernelResult::success();
}

KernelResult drafter_attn(const DrafterAttnParams& p, cudaStream_t stream) {
  if (KernelResult r = check_drafter_attn_params(p); !r.ok()) return r;
  DrafterAttnPlan plan;
  if (KernelResult r = drafter_attn_plan(p, &plan); !r.ok()) return r;
  if (p.batch == 0) return KernelResult::success();
  if (plan.workspace_bytes > 0 && (p.workspace_bytes < plan.workspace_bytes || !p.workspace))
    return KernelResult::invalid("drafter_attn: needs " + std::to_string(plan.workspace_bytes) +
                                 " bytes of workspace for " + std::to_string(plan.splits) + " key splits, got " +
                                 std::to_string(p.workspace_bytes) + " (ask drafter_attn_plan)");
  if (plan.workspace_bytes > 0 && reinterpret_cast<uintptr_t>(p.workspace) % kDrafterWorkspaceAlign != 0)
    return KernelResult::invalid("drafter_attn: workspace must be 256-byte aligned (cudaMalloc memory is)");
  kern::DrafterLaunch a;
  a.p = p;
  a.group_rows = plan.group_rows;
  a.tile_rows = plan.tile_rows;
  a.splits = plan.splits;
  a.ws = drafter_workspace_layout(p.batch, p.kv_heads, plan.splits, plan.group_rows, p.head_dim);
  const dim3 grid(static_cast<unsigned>(plan.row_tiles * p.kv_heads), static_cast<unsigned>(p.batch),
                  static_cast<unsigned>(plan.splits));
  const dim3 merge_grid(static_cast<unsigned>(p.heads * p.q_len), static_cast<unsigned>(p.batch));
  KernelResult result = KernelResult::success();
  KD_DISPATCH_DTYPE(p.dtype, T, {
    auto* kernel = kern::drafter_attn_kernel<T>;
    result = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), plan.smem_bytes, "drafter_attn");
    if (result.ok()) {
      KD_LAUNCH(kernel, grid, kern::kDrafterThreads, plan.smem_bytes, stream, a);
      result = launch_status("drafter_attn_kernel launch");
    }
    if (result.ok() && plan.splits > 1) {
      KD_LAUNCH(kern::drafter_merge_kernel<T>, merge_grid, kern::kDrafterMergeThreads, plan.merge_smem_bytes, stream, a);
      result = launch_status("drafter_merge_kernel launch");
    }
  });
  return result;
}

}  // namespace kdtree
