// The bf16 verify_attn kernels: the tile configurations the plans pick (seesaw wgmma, decode;
// listed in verify_attn_configs.h), in a baselines build also the baselines of csrc/dev/, and
// the merge, bf16 output.
#include "cluster_support.cuh"
#include "launch_support.h"
#include "verify_attn_decode.cuh"
#include "verify_attn_launch.h"
#include "verify_attn_seesaw.cuh"
#include "verify_attn_wgmma.cuh"
#include "verify_attn_configs.h"
#if defined(KD_VERIFY_ATTN_BASELINES)
#include "dev/verify_attn_baseline_kernels.cuh"
#endif

namespace kdtree {

namespace {

// The seesaw tile's launch: its TMA tensor maps encoded for this launch's pointers.
template <class Cfg, class Kernel>
KernelResult launch_Tma(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream,
                        Kernel kernel) {
  using namespace kern;
  if (KernelResult r = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, "verify_attn (bf16, TMA)");
      !r.ok())
    return r;
  AttnTmaMaps maps;
  if (KernelResult r = make_attn_tma_maps(k, &maps); !r.ok()) return r;
  const dim3 grid(plan.m_tiles, plan.splits, k.p.batch);
  if (plan.split_group > 1) {
#if defined(KD_VERIFY_ATTN_BASELINES)  // the seesaw pairs (a baseline): clusters of split_group CTAs along the keys
    return launch_status(KD_LAUNCH_CLUSTER(dim3(1, plan.split_group, 1), kernel, grid, Cfg::kThreads, Cfg::kSmemBytes,
                                           stream, k, maps),
                         "verify_attn (bf16, TMA, clusters along the keys) kernel launch");
#else
    return KernelResult::invalid("verify_attn (bf16): clusters along the keys are the seesaw pairs' (a baseline, "
                                 "-DKD_VERIFY_ATTN_BASELINES)");
#endif
  }
  KD_LAUNCH(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, k, maps);
  return launch_status("verify_attn (bf16, TMA) kernel launch");
}
}  // namespace

KernelResult launch_verify_attn_bf16(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream) {
  using namespace kern;
  KernelResult r;
  switch (plan.config) {  // the bf16 configurations (verify_attn_configs.h), with this build's baselines
    KD_VERIFY_ATTN_BF16_CONFIGS(KD_VERIFY_LAUNCH_CASE)
    KD_VERIFY_ATTN_BUILT_BASELINES(KD_VERIFY_LAUNCH_CASE)
    default: {
      const std::string unbuilt = verify_attn_config_unbuilt(plan.config);
      return KernelResult::invalid("verify_attn (bf16): plan config " + std::to_string(plan.config) + ": " +
                                   (unbuilt.empty() ? "not a bf16 one" : unbuilt));
    }
  }
#if defined(KD_ATTN_PHASE_CLOCKS)  // a measuring build: the kernel's phase cycles (csrc/dev/verify_attn_clocks.cuh)
  if (r.ok() && (verify_config_is_wgmma(plan.config) || verify_config_is_decode(plan.config))) {
    const int kind = verify_config_is_wgmma(plan.config) ? kClkSeesaw : kClkDecode;
    KD_LAUNCH(attn_clk_report_kernel, 1, 1, 0, stream, kind);
    if (KernelResult rr = launch_status("attn_clk_report_kernel launch"); !rr.ok()) return rr;
  }
#endif
  if (!r.ok() || verify_plan_parts(plan) == 1) return r;
  return launch_status(launch_verify_merge<__nv_bfloat16>(k, stream, plan.merge_overlap, plan.merge_wide), "verify_merge (bf16) launch");
}

}  // namespace kdtree
