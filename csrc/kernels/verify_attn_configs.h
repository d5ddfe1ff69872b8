// The verify_attn tile configurations the library compiles, listed once. The plan's enum and
// shapes (verify_attn_plan.h), the GPU launchers (verify_attn_bf16.cu, verify_attn_f32.cu) and
// the emulator's runner (kernels/emu/emu_attn_runner.h) expand these lists, so a configuration
// is launched the same way on both sides, or on neither. What each one is and which device's
// plan picks it: docs/kernels/verify_attn.md.
//
// X(config, number, rows, keys, smem, Cfg, form, kernel...):
//   config, number  the VerifyAttnConfig enumerator and its value (the bench's `config` column,
//                   force_config); numbers of configurations no plan selects any more stay unused
//   rows, keys      the tile: query rows x keys a step
//   smem            dynamic shared memory a block, bytes (the kernel headers static_assert it)
//   Cfg             the kernel's configuration struct in kern:: (kThreads, kSmemBytes)
//   form            how it launches: Plain (one block a row tile, split and request) or Tma (the
//                   tensor maps of make_attn_tma_maps as a second argument; clusters of
//                   plan.split_group blocks along the keys when that is > 1)
//   kernel...       the kernel in kern:: (the rest of the arguments: template commas)
#pragma once

#define KD_VERIFY_ATTN_BF16_CONFIGS(X)                                                                        \
  /* mma tile: mma.sync, 64 rows x 64 keys, two K stages; > 32 rows without wgmma */                          \
  X(kVerifyBf16Sm90, 0, 64, 64, 230672, Bf16AttnSm90, Plain, verify_attn_bf16_kernel<Bf16AttnSm90, __nv_bfloat16>) \
  /* small tile: 32 x 32, one K stage, ~76 KB: devices with ~100 KB a block (sm_120, sm_89) */               \
  X(kVerifyBf16Small, 1, 32, 32, 76944, Bf16AttnSmall, Plain, verify_attn_bf16_kernel<Bf16AttnSmall, __nv_bfloat16>) \
  /* decode tile: <= 32 rows, 64 keys, two K stages by bulk copies */                                          \
  X(kVerifyBf16Decode, 3, 32, 64, 192544, Bf16DecodeSm90, Plain,                                              \
    verify_attn_decode_kernel<Bf16DecodeSm90, __nv_bfloat16>)                                                  \
  /* small decode tile: <= 32 rows, 32 keys, one K stage, ~75 KB */                                            \
  X(kVerifyBf16DecodeSmall, 4, 32, 32, 76816, Bf16DecodeSmall, Plain,                                         \
    verify_attn_decode_kernel<Bf16DecodeSmall, __nv_bfloat16>)                                                 \
  /* seesaw tile: wgmma + TMA, the two warpgroups on alternate key tiles; sm_90a, > 32 rows */                 \
  X(kVerifyBf16WgmmaSeesaw, 10, 64, 64, 223288, Bf16AttnSeesaw, Tma, verify_attn_seesaw_kernel<__nv_bfloat16>) \
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

#define KD_VERIFY_ATTN_CONFIGS(X) KD_VERIFY_ATTN_BF16_CONFIGS(X) KD_VERIFY_ATTN_F32_CONFIGS(X)
