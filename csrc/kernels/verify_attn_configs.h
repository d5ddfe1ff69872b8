// The verify_attn tile configurations, listed once. The plan's enum and shapes
// (verify_attn_plan.h), the GPU launchers (verify_attn_bf16.cu, verify_attn_f32.cu) and the
// emulator's runner (kernels/emu/emu_attn_runner.h) expand these lists, so a configuration is
// launched the same way on both sides, or on neither. What each one is and which device's plan
// picks it: docs/kernels/verify_attn.md.
//
// These lists hold what a plan can pick, and the library compiles only them. The baselines
// (configurations no plan picks, kept to be timed against these) are listed in
// csrc/dev/verify_attn_baselines.h: their numbers and shapes are known everywhere, so that a
// forced one is refused with a reason, but their kernels are compiled only into a baselines
// build (-DKD_VERIFY_ATTN_BASELINES) and the emulator's kernel tests.
//
// X(config, number, rows, keys, smem, Cfg, form, kernel...):
//   config, number  the VerifyAttnConfig enumerator and its value (the bench's `config` column,
//                   force_config); numbers of configurations that are gone stay unused
//   rows, keys      the tile: query rows x keys a step
//   smem            dynamic shared memory a block, bytes (the kernel headers static_assert it)
//   Cfg             the kernel's configuration struct in kern:: (kThreads, kSmemBytes)
//   form            how it launches: Plain (one block a row tile, split and request) or Tma (the
//                   tensor maps of make_attn_tma_maps as a second argument; clusters of
//                   plan.split_group blocks along the keys when that is > 1: the seesaw pairs,
//                   so in the GPU launcher a baselines build only)
//   kernel...       the kernel in kern:: (the rest of the arguments: template commas)
#pragma once

#include "dev/verify_attn_baselines.h"

#define KD_VERIFY_ATTN_BF16_CONFIGS(X)                                                                        \
  /* decode tile: <= 32 rows, 64 keys, two K stages by bulk copies */                                          \
  X(kVerifyBf16Decode, 3, 32, 64, 192544, Bf16DecodeSm90, Plain,                                              \
    verify_attn_decode_kernel<Bf16DecodeSm90, __nv_bfloat16>)                                                  \
  /* seesaw tile: wgmma + TMA, the two warpgroups on alternate key tiles; sm_90a, > 32 rows */                 \
  X(kVerifyBf16WgmmaSeesaw, 10, 64, 64, 223288, Bf16AttnSeesaw, Tma, verify_attn_seesaw_kernel<__nv_bfloat16, false>) \
  /* narrow decode tile: the decode tile with one m16 row group, <= 16 rows */                                 \
  X(kVerifyBf16DecodeNarrow, 11, 16, 64, 171040, Bf16DecodeNarrow, Plain,                                     \
    verify_attn_decode_kernel<Bf16DecodeNarrow, __nv_bfloat16>)                                                \
  /* narrow decode, two a SM: 32-key tiles, ~93 KB; over 11 where its splits would be long; sm_120's tile */   \
  X(kVerifyBf16DecodeNarrowPair, 12, 16, 32, 94752, Bf16DecodeNarrowPair, Plain,                              \
    verify_attn_decode_kernel<Bf16DecodeNarrowPair, __nv_bfloat16>)

#define KD_VERIFY_ATTN_F32_CONFIGS(X)                                                                         \
  /* float32: CUDA cores, 16 rows x 32 keys, ~111 KB */                                                        \
  X(kVerifyF32, 2, 16, 32, 113488, F32Attn, Plain, verify_attn_f32_kernel<F32Attn>)                           \
  /* narrow float32: 8 rows, ~92 KB: the float32 tile of ~99 KB devices (sm_120) */                            \
  X(kVerifyF32Narrow, 13, 8, 32, 93872, F32AttnNarrow, Plain, verify_attn_f32_kernel<F32AttnNarrow>)

// What the plans pick: what the library's launchers hold in every build
#define KD_VERIFY_ATTN_CONFIGS(X) KD_VERIFY_ATTN_BF16_CONFIGS(X) KD_VERIFY_ATTN_F32_CONFIGS(X)
// Every configuration with a number: the planned ones and the baselines (all bf16)
#define KD_VERIFY_ATTN_ALL_CONFIGS(X) KD_VERIFY_ATTN_CONFIGS(X) KD_VERIFY_ATTN_BASELINE_CONFIGS(X)

// The baselines this build's GPU launchers hold: all of them in a baselines build, else none
#if defined(KD_VERIFY_ATTN_BASELINES)
#define KD_VERIFY_ATTN_BUILT_BASELINES(X) KD_VERIFY_ATTN_BASELINE_CONFIGS(X)
#else
#define KD_VERIFY_ATTN_BUILT_BASELINES(X)
#endif
