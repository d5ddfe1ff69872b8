// The bf16 verify_attn kernels: the tile configurations (mma.sync, wgmma, decode) and the
// merge, bf16 output.
#include "cluster_support.cuh"
#include "launch_support.h"
#include "verify_attn_bf16.cuh"
#include "verify_attn_decode.cuh"
#include "verify_attn_launch.h"
#include "verify_attn_seesaw.cuh"
#include "verify_attn_wgmma.cuh"

namespace kdtree {

namespace {
template <class Cfg, void (*Kernel)(kern::VerifyKernelParams)>
KernelResult launch_config(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  auto* kernel = Kernel;
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, "verify_attn (bf16)");
      !r.ok())
    return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  KD_LAUNCH(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, k);
  return launch_status("verify_attn (bf16) kernel launch");
}

// The TMA wgmma and seesaw tiles (configs 9 and 10): wgmma tiles with TMA loads, their tensor maps encoded for this launch's
// pointers; a plan that reduces its splits on chip (the seesaw tile's pairs) launches clusters of
// split_group CTAs along the keys.
template <void (*Kernel)(kern::VerifyKernelParams, kern::AttnTmaMaps)>
KernelResult launch_wgmma_tma(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, size_t smem_bytes,
                              cudaStream_t stream) {
  using namespace kern;
  auto* kernel = Kernel;
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem_bytes, "verify_attn (bf16, TMA)");
      !r.ok())
    return r;
  AttnTmaMaps maps;
  if (KernelResult r = make_attn_tma_maps(k, &maps); !r.ok()) return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  if (plan.split_group > 1)
    return launch_status(KD_LAUNCH_CLUSTER(dim3(1, plan.split_group, 1), kernel, grid, Bf16AttnWgmma::kThreads, smem_bytes,
                                           stream, k, maps),
                         "verify_attn (bf16, TMA, clusters along the keys) kernel launch");
  KD_LAUNCH(kernel, grid, Bf16AttnWgmma::kThreads, smem_bytes, stream, k, maps);
  return launch_status("verify_attn (bf16, TMA) kernel launch");
}
}  // namespace

KernelResult launch_verify_attn_bf16(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  using namespace kern;
  KernelResult r;
  switch (plan.config) {
    case kVerifyBf16Sm90:
      r = launch_config<Bf16AttnSm90, verify_attn_bf16_kernel<Bf16AttnSm90, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16Sm90Classic:
      r = launch_config<Bf16AttnSm90Classic, verify_attn_bf16_kernel<Bf16AttnSm90Classic, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16Wgmma:
      r = launch_config<Bf16AttnWgmma, verify_attn_wgmma_kernel<__nv_bfloat16, false>>(k, plan, stream);
      break;
    case kVerifyBf16WgmmaRs:
      r = launch_config<Bf16AttnWgmma, verify_attn_wgmma_kernel<__nv_bfloat16, true>>(k, plan, stream);
      break;
    case kVerifyBf16WgmmaLean:
      r = launch_config<Bf16AttnWgmma, verify_attn_wgmma_kernel<__nv_bfloat16, true, true>>(k, plan, stream);
      break;
    case kVerifyBf16WgmmaTma:
      r = launch_wgmma_tma<verify_attn_wgmma_tma_kernel<__nv_bfloat16>>(k, plan, Bf16AttnWgmma::kTmaSmemBytes, stream);
      break;
    case kVerifyBf16WgmmaSeesaw:
      r = launch_wgmma_tma<verify_attn_seesaw_kernel<__nv_bfloat16>>(k, plan, Bf16AttnSeesaw::kSmemBytes, stream);
      break;
    case kVerifyBf16Small:
      r = launch_config<Bf16AttnSmall, verify_attn_bf16_kernel<Bf16AttnSmall, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16Decode:
      r = launch_config<Bf16DecodeSm90, verify_attn_decode_kernel<Bf16DecodeSm90, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16DecodeNarrow:
      r = launch_config<Bf16DecodeNarrow, verify_attn_decode_kernel<Bf16DecodeNarrow, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16DecodeNarrowPair:
      r = launch_config<Bf16DecodeNarrowPair, verify_attn_decode_kernel<Bf16DecodeNarrowPair, __nv_bfloat16>>(k, plan, stream);
      break;
    case kVerifyBf16DecodeSmall:
      r = launch_config<Bf16DecodeSmall, verify_attn_decode_kernel<Bf16DecodeSmall, __nv_bfloat16>>(k, plan, stream);
      break;
    default:
      return KernelResult::invalid("verify_attn (bf16): plan config " + std::to_string(plan.config) + " is not a bf16 one");
  }
#if defined(KD_ATTN_PHASE_CLOCKS)  // a measuring build: the kernel's phase cycles (verify_attn_clocks.cuh)
  if (r.ok() && (verify_config_is_wgmma(plan.config) || verify_config_is_decode(plan.config))) {
    const int kind = plan.config == kVerifyBf16WgmmaSeesaw ? kClkSeesaw : verify_config_is_decode(plan.config) ? kClkDecode : kClkWgmma;
    KD_LAUNCH(attn_clk_report_kernel, 1, 1, 0, stream, kind);
    if (KernelResult rr = launch_status("attn_clk_report_kernel launch"); !rr.ok()) return rr;
  }
#endif
  if (!r.ok() || verify_plan_parts(plan) == 1) return r;
  return launch_status(launch_verify_merge<__nv_bfloat16>(k, stream, plan.merge_overlap, plan.merge_wide), "verify_merge (bf16) launch");
}

}  // namespace kdtree
