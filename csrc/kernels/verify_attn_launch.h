// Internal: the per-configuration launch functions of verify_attn, each defined in its own
// translation unit (verify_attn_bf16.cu, verify_attn_f32.cu) so the kernels compile in
// parallel; verify_attn.cu plans and dispatches.
#pragma once

#include <cuda_runtime_api.h>

#include "verify_attn.cuh"

namespace kdtree {
namespace kern {
struct VerifyKernelParams;
}

// Launch the attention kernel (and the merge when splits > 1) for plan.config.
KernelResult launch_verify_attn_bf16(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream);
KernelResult launch_verify_attn_f32(const kern::VerifyKernelParams& k, const VerifyAttnPlan& plan, cudaStream_t stream);

}  // namespace kdtree
