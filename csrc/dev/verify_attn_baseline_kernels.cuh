// The kernels of verify_attn's baselines (verify_attn_baselines.h): what a launcher includes to
// expand KD_VERIFY_ATTN_BASELINE_CONFIGS. The GPU launcher does in a baselines build
// (-DKD_VERIFY_ATTN_BASELINES) only; the emulator's kernel tests always, so that a baseline
// timed against the planned tiles computes what they do.
#pragma once

#include "dev/verify_attn_mma_tile.cuh"
#include "kernels/verify_attn_decode.cuh"
#include "kernels/verify_attn_seesaw.cuh"

namespace kdtree::kern {

// Config 4: the decode kernel with 32-key tiles in one stage by cp.async, ~75 KB
using Bf16DecodeSmall = Bf16DecodeConfig<32, 1>;
static_assert(verify_config_describes<Bf16DecodeSmall>(kVerifyBf16DecodeSmall),
              "verify_attn_baselines.h must describe Bf16DecodeSmall");
// Config 14 is the seesaw kernel with Pairs = true (verify_attn_seesaw.cuh: seesaw_pair_store)
static_assert(verify_config_describes<Bf16AttnSeesaw>(kVerifyBf16WgmmaSeesawPairs),
              "verify_attn_baselines.h must describe the seesaw pairs");

}  // namespace kdtree::kern
