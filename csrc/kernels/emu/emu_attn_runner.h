// The verify_attn runner on the SIMT emulator: the launcher's plan (on the emulated device
// with only a few SMs, so splits happen) and the kernels of every configuration, the baselines
// of csrc/dev/ included (a kernel test, not the library: a baseline is timed on a GPU only if it
// computes what the planned tiles do).
#pragma once

#include "emu_device.h"
#include "dev/verify_attn_baseline_kernels.cuh"
#include "kernels/verify_attn_configs.h"
#include "kernels/verify_attn_decode.cuh"
#include "kernels/verify_attn_f32.cuh"
#include "kernels/verify_attn_plan.h"
#include "kernels/verify_attn_seesaw.cuh"
#include "kernels/verify_attn_wgmma.cuh"
#include "common/kernel_checks/verify_attn_cases.h"

namespace kdtree::test {

struct EmuAttnRunner {
  int sms = 4;  // a few SMs, so that splits happen; the rest is the emulated device's (emu_device.h)
  int smem_optin = emulated_device_limits().smem_optin;
  int smem_per_sm = emulated_device_limits().smem_per_sm;
  bool wgmma = emulated_device_limits().wgmma;  // the wgmma tiles may be planned (and forced)
  VerifyAttnPlan last_plan;

  // A request's cache rows past its prefix + T (unwritten rows of a real cache) hold NaN
  // here: no kernel may let them reach the output (the TMA tile reads them, then masks them).
  static std::vector<uint16_t> cache_with_nan_tail(const AttnIO& io) {
    constexpr uint16_t kBf16NaN = 0x7FC0;
    std::vector<uint16_t> kv = io.kv;
    for (int b = 0; b < io.batch; ++b) {
      const int prefix = io.with_prefix_array ? io.prefix[b] : io.max_prefix;
      const size_t first = static_cast<size_t>(b) * io.kv_rows + std::min(io.kv_rows, prefix + io.tree_len);
      std::fill(kv.begin() + first * kVerifyQKDim, kv.begin() + (static_cast<size_t>(b) + 1) * io.kv_rows * kVerifyQKDim,
                kBf16NaN);
    }
    return kv;
  }

  // One block a (row tile, split, request).
  template <class Cfg, class Kernel>
  static KernelResult launch_Plain(const VerifyAttnPlan& plan, const kern::VerifyKernelParams& k, Kernel kernel) {
    ::kdemu::launch(dim3(plan.m_tiles, plan.splits, k.p.batch), dim3(Cfg::kThreads), Cfg::kSmemBytes, kernel, k);
    return KernelResult::success();
  }
  // With the launch's TMA maps; the seesaw tile's pairs as clusters along the keys, run together.
  template <class Cfg, class Kernel>
  static KernelResult launch_Tma(const VerifyAttnPlan& plan, const kern::VerifyKernelParams& k, Kernel kernel) {
    kern::AttnTmaMaps maps;
    if (KernelResult r = kern::make_attn_tma_maps(k, &maps); !r.ok()) return r;
    const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
    if (plan.split_group > 1)
      ::kdemu::launch_cluster(grid, dim3(1, plan.split_group, 1), dim3(Cfg::kThreads), Cfg::kSmemBytes, kernel, k, maps);
    else
      ::kdemu::launch(grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, kernel, k, maps);
    return KernelResult::success();
  }

  KernelResult attn(AttnIO& io) {
    std::vector<float> q_lat_f, q_pe_f, kv_f;
    std::vector<__nv_bfloat16> out_b;
    std::vector<float> out_f;
    const std::vector<uint16_t> kv = cache_with_nan_tail(io);
    AttnIOArrays at;
    if (io.dtype == AttnDType::kF32) {
      q_lat_f = AttnIO::widen(io.q_lat);
      q_pe_f = AttnIO::widen(io.q_pe);
      kv_f = AttnIO::widen(kv);
      at.q_lat = q_lat_f.data();
      at.q_pe = q_pe_f.data();
      at.kv = kv_f.data();
      out_f.assign(io.out.size(), poison_f32());
      at.out = out_f.data();
    } else {
      at.q_lat = io.q_lat.data();
      at.q_pe = io.q_pe.data();
      at.kv = kv.data();
      out_b.assign(io.out.size(), __float2bfloat16_rn(poison_f32()));
      at.out = out_b.data();
    }
    at.prefix = io.prefix.data();
    at.vis = io.vis.data();
    at.lse = io.lse.data();
    const VerifyAttnParams p = verify_attn_params(io, at);
    VerifyAttnPlan plan;
    if (KernelResult r = make_verify_attn_plan(p, sms, smem_optin, smem_per_sm, &plan, wgmma); !r.ok()) return r;
    last_plan = plan;
    std::vector<uint8_t> workspace(plan.workspace_bytes + 256);
    uint8_t* ws = workspace.data() + (256 - reinterpret_cast<uintptr_t>(workspace.data()) % 256) % 256;
    const kern::VerifyKernelParams k = kern::make_kernel_params(p, plan, ws);
    using namespace kern;
    switch (plan.config) {  // every configuration (verify_attn_configs.h), as the GPU launchers run it
#define KD_EMU_VERIFY_LAUNCH_CASE(config, number, rows, keys, smem, Cfg, form, ...) \
  case config:                                                                      \
    if (KernelResult r = launch_##form<Cfg>(plan, k, __VA_ARGS__); !r.ok()) return r; \
    break;
      KD_VERIFY_ATTN_ALL_CONFIGS(KD_EMU_VERIFY_LAUNCH_CASE)
#undef KD_EMU_VERIFY_LAUNCH_CASE
      default:
        return KernelResult::invalid("verify_attn (emulated): no configuration " + std::to_string(plan.config));
    }
    if (verify_plan_parts(plan) > 1) {
      if (verify_config_is_f32(plan.config)) launch_verify_merge<float>(k, nullptr);
      else launch_verify_merge<__nv_bfloat16>(k, nullptr);
    }
    if (io.dtype == AttnDType::kF32) io.out = out_f;
    else
      for (size_t i = 0; i < out_b.size(); ++i) io.out[i] = __bfloat162float(out_b[i]);
    return KernelResult::success();
  }
};

}  // namespace kdtree::test
