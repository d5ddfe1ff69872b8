// verify_attn's baselines: tile configurations no device's plan picks, kept to be timed against
// the ones it does (bench_kernels' `config=` key) and checked on the emulator. Entries as in
// kernels/verify_attn_configs.h (X(config, number, rows, keys, smem, Cfg, form, kernel...)).
// Their kernels: verify_attn_mma_tile.cuh (configs 0, 1), the decode kernel of
// kernels/verify_attn_decode.cuh in its one-stage cp.async form (4), the seesaw kernel with its
// pair epilogue (14). A GPU build holds them only with -DKD_VERIFY_ATTN_BASELINES:
//
//     NVCC_APPEND_FLAGS="-DKD_VERIFY_ATTN_BASELINES" kdtree build --build-dir build-baselines bench_kernels
//
// What each one measured against the planned tiles: docs/kernels/verify_attn.md.
#pragma once

#define KD_VERIFY_ATTN_BASELINE_CONFIGS(X)                                                                    \
  /* mma tile: mma.sync, 64 rows x 64 keys, two K stages: > 32 rows without wgmma (before the seesaw) */       \
  X(kVerifyBf16Sm90, 0, 64, 64, 230672, Bf16AttnSm90, Plain, verify_attn_bf16_kernel<Bf16AttnSm90, __nv_bfloat16>) \
  /* small tile: 32 x 32, one K stage, ~76 KB: the one-stage tile config 12 replaced on sm_120 */              \
  X(kVerifyBf16Small, 1, 32, 32, 76944, Bf16AttnSmall, Plain, verify_attn_bf16_kernel<Bf16AttnSmall, __nv_bfloat16>) \
  /* small decode tile: <= 32 rows, 32 keys, one K stage by cp.async, ~75 KB: likewise */                      \
  X(kVerifyBf16DecodeSmall, 4, 32, 32, 76816, Bf16DecodeSmall, Plain,                                         \
    verify_attn_decode_kernel<Bf16DecodeSmall, __nv_bfloat16>)                                                 \
  /* seesaw pairs: the seesaw tile reducing its splits in pairs on chip (clusters of two along the keys,   \
     partial O through distributed shared memory): half the partials written and merged */                  \
  X(kVerifyBf16WgmmaSeesawPairs, 14, 64, 64, 223288, Bf16AttnSeesaw, Tma,                                     \
    verify_attn_seesaw_kernel<__nv_bfloat16, true>)
