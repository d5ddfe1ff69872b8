// Float pairs: a value carried as the unevaluated sum hi + lo of two float32s (~48 bits), and
// e^x / log in that form with float32 operations only. topk_logprobs sums e^x over every logit
// with these: python_engine/ddtree/topk.py forms logp = float32(x - lse) from a float64 lse, and
// only an lse about that accurate rounds x - lse to the same float32 (an lse off by 1e-12 rounds
// ~1 in 10^6 log-probabilities the other way). float64 would do it, but the RTX PRO 6000
// (GB202) runs float64 at 1/64 of the float32 rate: one float64 exp per logit, not the
// memory, set topk's time there. A pair exp is ~50 float32 operations, a pair add 11.
//
//   e^x 2^-mk: q = round(x 256/ln2), r = x - q ln2/256 (|r| <= ln2/512; ln2/256 in three
//   floats, the first product exact by construction, the second split exactly by an fma)
//   -> e^x 2^-mk = 2^((q >> 8) - mk) 2^((q & 255)/256) e^r; the 256 entries of 2^(j/256) as
//   correctly rounded pairs; e^r - 1 by Taylor to r^4 (r^5/120 < 2^-54), its r + r^2/2 part
//   as a pair.
//
// Each result is within ~2^-47 of its value relative; rounding errors of many terms average
// out in a sum (topk_logprobs' lse of 163840 random logits lands within ~2^-50 of its value:
// emu_topk_test).
#pragma once

#include "device_compat.cuh"

namespace kdtree::kern {

struct alignas(8) FloatPair {  // 8-aligned: read as one 8-byte load
  float hi, lo;  // the value hi + lo; |lo| within a few ulps of hi
  FloatPair() = default;  // trivial (shared memory holds these); FloatPair{} is 0
  KD_HOST_DEVICE constexpr FloatPair(float h, float l = 0.0f) : hi(h), lo(l) {}
};

// a + b = s.hi + s.lo exactly (Knuth; any order of magnitudes)
KD_DEVICE FloatPair two_sum(float a, float b) {
  const float s = __fadd_rn(a, b);
  const float bb = __fadd_rn(s, -a);
  const float err = __fadd_rn(__fadd_rn(a, -__fadd_rn(s, -bb)), __fadd_rn(b, -bb));
  return {s, err};
}

// a + b = s.hi + s.lo exactly when |a| >= |b| or a == 0 (Dekker)
KD_DEVICE FloatPair fast_two_sum(float a, float b) {
  const float s = __fadd_rn(a, b);
  return {s, __fadd_rn(b, -__fadd_rn(s, -a))};
}

// a + b, renormalised. Commutative bit for bit (two_sum's error is exact), so butterfly
// reductions leave the same value in every lane.
KD_DEVICE FloatPair pair_add(FloatPair a, FloatPair b) {
  const FloatPair s = two_sum(a.hi, b.hi);
  return fast_two_sum(s.hi, __fadd_rn(s.lo, __fadd_rn(a.lo, b.lo)));
}

// a times a power of two (exact while the parts stay normal)
KD_DEVICE FloatPair pair_scale(FloatPair a, float pow2) { return {__fmul_rn(a.hi, pow2), __fmul_rn(a.lo, pow2)}; }

// a * b, renormalised
KD_DEVICE FloatPair pair_mul(FloatPair a, FloatPair b) {
  const float p = __fmul_rn(a.hi, b.hi);
  const float e = fmaf(a.hi, b.hi, -p);
  return fast_two_sum(p, __fadd_rn(e, __fadd_rn(__fmul_rn(a.hi, b.lo), __fmul_rn(a.lo, b.hi))));
}

// 2^e as a float for -126 <= e <= 127; 0 below (rescales of sums to a higher reference)
KD_DEVICE float pow2_nonpositive_f32(int e) { return e >= -126 ? __int_as_float((e + 127) << 23) : 0.0f; }

constexpr int kExpPairBits = 8;  // the table of 2^(j/256)
constexpr int kExpPairTableSize = 1 << kExpPairBits;
constexpr float kExpPairInvStep = 0x1.715476p+8f;  // 256/ln2 (rounded: it only picks q)
constexpr float kExpPairStep1 = 0x1.62e43p-9f;     // ln2/256 = step1 + step2 + step3: float(ln2/256),
constexpr float kExpPairStep2 = -0x1.05c61p-37f;   //   whose ulp (2^-32) makes x - q step1 exact for
constexpr float kExpPairStep3 = -0x1.950d88p-62f;  //   |q| < 2^21, then the next two roundings
constexpr float kExpPairRound = 0x1.8p23f;         // adding it rounds to an integer held in the low bits
constexpr int kExpPairRoundBits = 0x4b400000;      // its bits: shifted's bits less these are q - 256 mk
constexpr float kExpPairMaxAbs = 5678.0f;          // |x| below it: |q| < 2^21
constexpr float kExpPairRange = 80.0f;             // e^-80 < 2^-115: callers keep e^x 2^-mk above it

// 2^(j/256), j = 0..255, as pairs: hi correctly rounded, lo the correctly rounded rest
// (computed with 200-bit arithmetic, mpmath).
KD_DEVICE_TABLE FloatPair kExp2PairTable[kExpPairTableSize] = {
    {0x1p+0f, 0.0f}, {0x1.00b1bp+0f, -0x1.6950dp-26f}, {0x1.0163dap+0f, 0x1.3f6666p-25f},
    {0x1.021682p+0f, -0x1.789fbp-25f}, {0x1.02c9a4p+0f, -0x1.887fap-28f}, {0x1.037d42p+0f, 0x1.c2377ap-25f},
    {0x1.04315ep+0f, 0x1.0dcffp-25f}, {0x1.04e5f8p+0f, -0x1.a1356ap-25f}, {0x1.059b0ep+0f, -0x1.9d4f52p-25f},
    {0x1.0650ap+0f, 0x1.c783f2p-25f}, {0x1.0706b2p+0f, 0x1.3bbedcp-25f}, {0x1.07bd42p+0f, 0x1.6e5506p-25f},
    {0x1.087452p+0f, -0x1.e2990ep-26f}, {0x1.092bep+0f, -0x1.333f04p-25f}, {0x1.09e3ecp+0f, 0x1.58de7p-25f},
    {0x1.0a9c7ap+0f, -0x1.3831bap-26f}, {0x1.0b5586p+0f, 0x1.9f3122p-25f}, {0x1.0c0f14p+0f, 0x1.791b22p-26f},
    {0x1.0cc922p+0f, 0x1.6e48fep-25f}, {0x1.0d83b2p+0f, 0x1.9caef6p-27f}, {0x1.0e3ec4p+0f, -0x1.a585ccp-25f},
    {0x1.0efa56p+0f, -0x1.02b1dap-31f}, {0x1.0fb66ap+0f, 0x1.ffda64p-25f}, {0x1.107302p+0f, 0x1.1ae468p-25f},
    {0x1.11301ep+0f, -0x1.fdb496p-25f}, {0x1.11edbap+0f, 0x1.6bc556p-25f}, {0x1.12abdcp+0f, 0x1.b0c73p-30f},
    {0x1.136a82p+0f, -0x1.61bf6ap-25f}, {0x1.1429aap+0f, 0x1.d525bcp-25f}, {0x1.14e95ap+0f, -0x1.9619dap-25f},
    {0x1.15a98cp+0f, 0x1.14b1cap-25f}, {0x1.166a46p+0f, -0x1.71c788p-25f}, {0x1.172b84p+0f, -0x1.c15742p-27f},
    {0x1.17ed48p+0f, 0x1.a56efp-26f}, {0x1.18af94p+0f, -0x1.dcdc86p-26f}, {0x1.197266p+0f, -0x1.f228b4p-26f},
    {0x1.1a35bep+0f, 0x1.6df96ep-25f}, {0x1.1af9ap+0f, -0x1.fb1d78p-26f}, {0x1.1bbe08p+0f, 0x1.011734p-26f},
    {0x1.1c82fap+0f, -0x1.5afc72p-25f}, {0x1.1d4874p+0f, -0x1.d2e8cap-25f}, {0x1.1e0e76p+0f, -0x1.4bbfdap-28f},
    {0x1.1ed502p+0f, 0x1.7e6c8ep-27f}, {0x1.1f9c18p+0f, 0x1.0e3394p-26f}, {0x1.2063b8p+0f, 0x1.0c519ap-25f},
    {0x1.212be4p+0f, -0x1.50eafcp-25f}, {0x1.21f49ap+0f, -0x1.d0446ep-25f}, {0x1.22bddap+0f, 0x1.3c8968p-27f},
    {0x1.2387a6p+0f, 0x1.ceac48p-25f}, {0x1.2452p+0f, -0x1.1f7afep-26f}, {0x1.251ce4p+0f, 0x1.f654c8p-25f},
    {0x1.25e858p+0f, -0x1.dc2632p-25f}, {0x1.26b456p+0f, 0x1.789f38p-26f}, {0x1.2780e4p+0f, -0x1.7c441ap-25f},
    {0x1.284dfep+0f, 0x1.f5638p-28f}, {0x1.291ba8p+0f, -0x1.4dc892p-25f}, {0x1.29e9ep+0f, -0x1.5c0424p-25f},
    {0x1.2ab8a6p+0f, 0x1.b443c4p-26f}, {0x1.2b87fep+0f, -0x1.e4a4cep-25f}, {0x1.2c57e4p+0f, -0x1.a23934p-26f},
    {0x1.2d285ap+0f, 0x1.b900c2p-26f}, {0x1.2df962p+0f, -0x1.37d4eep-29f}, {0x1.2ecafap+0f, 0x1.27c5eap-25f},
    {0x1.2f9d24p+0f, 0x1.57b10ep-25f}, {0x1.306fep+0f, 0x1.4636e2p-25f}, {0x1.31432ep+0f, 0x1.bdd66p-25f},
    {0x1.32171p+0f, -0x1.d993e8p-27f}, {0x1.32eb84p+0f, -0x1.15c574p-26f}, {0x1.33c08cp+0f, -0x1.b37d2p-25f},
    {0x1.349626p+0f, 0x1.b8fe8cp-26f}, {0x1.356c56p+0f, -0x1.b5803cp-30f}, {0x1.36431ap+0f, 0x1.6f441ep-27f},
    {0x1.371a74p+0f, -0x1.18aac6p-25f}, {0x1.37f262p+0f, 0x1.8f3aa4p-27f}, {0x1.38cae6p+0f, 0x1.a0bb0cp-25f},
    {0x1.39a402p+0f, -0x1.23afc4p-26f}, {0x1.3a7db4p+0f, -0x1.634c02p-25f}, {0x1.3b57fcp+0f, -0x1.3930bap-32f},
    {0x1.3c32dcp+0f, 0x1.89d472p-27f}, {0x1.3d0e54p+0f, 0x1.3b785cp-26f}, {0x1.3dea64p+0f, 0x1.824684p-25f},
    {0x1.3ec70ep+0f, -0x1.c75d16p-29f}, {0x1.3fa45p+0f, 0x1.2b2006p-26f}, {0x1.40822cp+0f, 0x1.b3d012p-27f},
    {0x1.4160a2p+0f, 0x1.f72e2ap-28f}, {0x1.423fb2p+0f, 0x1.c251a2p-26f}, {0x1.431f5ep+0f, -0x1.abd5dap-26f},
    {0x1.43ffa4p+0f, -0x1.ed18bp-30f}, {0x1.44e086p+0f, 0x1.8624b4p-30f}, {0x1.45c204p+0f, 0x1.53e918p-27f},
    {0x1.46a41ep+0f, 0x1.a3a00ap-25f}, {0x1.4786d6p+0f, 0x1.a2cc8ep-26f}, {0x1.486a2cp+0f, -0x1.47d866p-25f},
    {0x1.494e1ep+0f, 0x1.92aed2p-28f}, {0x1.4a32bp+0f, -0x1.e50584p-25f}, {0x1.4b17dep+0f, 0x1.4db6fap-25f},
    {0x1.4bfdaep+0f, -0x1.593abcp-25f}, {0x1.4ce41cp+0f, -0x1.fa0fbap-26f}, {0x1.4dcb2ap+0f, -0x1.8088bcp-26f},
    {0x1.4eb2d8p+0f, 0x1.d8abfep-28f}, {0x1.4f9b28p+0f, -0x1.2c5a6cp-25f}, {0x1.508418p+0f, -0x1.759c24p-29f},
    {0x1.516daap+0f, 0x1.67b32p-27f}, {0x1.5257dep+0f, 0x1.07e9dep-25f}, {0x1.5342b6p+0f, -0x1.2c561p-25f},
    {0x1.542e3p+0f, -0x1.612a5cp-25f}, {0x1.551a4cp+0f, 0x1.4bb242p-25f}, {0x1.56070ep+0f, -0x1.0b7798p-27f},
    {0x1.56f474p+0f, -0x1.295b04p-25f}, {0x1.57e27ep+0f, -0x1.074eccp-26f}, {0x1.58d12ep+0f, -0x1.6d07p-25f},
    {0x1.59c082p+0f, 0x1.ffc1f2p-26f}, {0x1.5ab07ep+0f, -0x1.5bd5ecp-27f}, {0x1.5ba12p+0f, -0x1.15e18p-26f},
    {0x1.5c9268p+0f, 0x1.4b28d6p-25f}, {0x1.5d845ap+0f, -0x1.ecce8ep-25f}, {0x1.5e76f2p+0f, -0x1.4a5bd6p-25f},
    {0x1.5f6a32p+0f, 0x1.b9d6e2p-29f}, {0x1.605e1cp+0f, -0x1.a248fep-26f}, {0x1.6152aep+0f, 0x1.b37dbep-26f},
    {0x1.6247ecp+0f, -0x1.f8b55p-25f}, {0x1.633dd2p+0f, -0x1.736b02p-27f}, {0x1.643464p+0f, -0x1.66679cp-25f},
    {0x1.652bap+0f, -0x1.43704ap-28f}, {0x1.662388p+0f, 0x1.2a9112p-27f}, {0x1.671c1cp+0f, 0x1.c20cfep-26f},
    {0x1.68155ep+0f, -0x1.766ad2p-25f}, {0x1.690f4cp+0f, -0x1.cc2d58p-25f}, {0x1.6a09e6p+0f, 0x1.9fcef4p-26f},
    {0x1.6b053p+0f, -0x1.62ba3p-26f}, {0x1.6c0128p+0f, -0x1.5e84a8p-25f}, {0x1.6cfdcep+0f, -0x1.15c4dep-27f},
    {0x1.6dfb24p+0f, -0x1.cd72e8p-27f}, {0x1.6ef92ap+0f, -0x1.e9b146p-26f}, {0x1.6ff7ep+0f, -0x1.ab9aep-26f},
    {0x1.70f746p+0f, 0x1.bd0ba2p-26f}, {0x1.71f75ep+0f, 0x1.1d8beep-25f}, {0x1.72f828p+0f, 0x1.bab422p-26f},
    {0x1.73f9a4p+0f, 0x1.14b02ep-25f}, {0x1.74fbd4p+0f, -0x1.45068p-25f}, {0x1.75feb6p+0f, -0x1.37b306p-25f},
    {0x1.77024cp+0f, -0x1.ca923ep-25f}, {0x1.780694p+0f, 0x1.fbcba8p-25f}, {0x1.790b94p+0f, -0x1.d4f8c2p-26f},
    {0x1.7a1148p+0f, -0x1.829fdp-25f}, {0x1.7b17bp+0f, 0x1.2ed9fcp-25f}, {0x1.7c1edp+0f, 0x1.30c132p-28f},
    {0x1.7d26a6p+0f, 0x1.7fc378p-27f}, {0x1.7e2f34p+0f, -0x1.261634p-25f}, {0x1.7f3878p+0f, 0x1.247124p-26f},
    {0x1.804276p+0f, -0x1.783cbep-25f}, {0x1.814d2ap+0f, 0x1.ba20dcp-25f}, {0x1.82589ap+0f, -0x1.accc7cp-26f},
    {0x1.8364c2p+0f, -0x1.46be08p-28f}, {0x1.8471a4p+0f, 0x1.88f1ecp-26f}, {0x1.857f42p+0f, -0x1.0c149cp-25f},
    {0x1.868d9ap+0f, -0x1.2edb44p-26f}, {0x1.879caep+0f, -0x1.b396f2p-26f}, {0x1.88ac7ep+0f, -0x1.9d665ap-26f},
    {0x1.89bd0ap+0f, 0x1.1e1604p-26f}, {0x1.8ace54p+0f, 0x1.15506ep-27f}, {0x1.8be05cp+0f, -0x1.4a7a22p-26f},
    {0x1.8cf322p+0f, -0x1.29576ep-25f}, {0x1.8e06a6p+0f, -0x1.f79928p-28f}, {0x1.8f1aeap+0f, -0x1.baa232p-26f},
    {0x1.902feep+0f, -0x1.fafa6ep-25f}, {0x1.9145bp+0f, 0x1.723ff8p-25f}, {0x1.925c36p+0f, -0x1.8aba04p-25f},
    {0x1.93737cp+0f, -0x1.e64744p-25f}, {0x1.948b82p+0f, 0x1.6bf31cp-25f}, {0x1.95a44cp+0f, 0x1.790a42p-25f},
    {0x1.96bddap+0f, -0x1.6263d4p-26f}, {0x1.97d82ap+0f, -0x1.0d8d84p-31f}, {0x1.98f33ep+0f, 0x1.1e88a8p-26f},
    {0x1.9a0f18p+0f, -0x1.e6bf08p-25f}, {0x1.9b2bb4p+0f, 0x1.aa7fc2p-25f}, {0x1.9c4918p+0f, 0x1.51f848p-27f},
    {0x1.9d6742p+0f, -0x1.ad11cap-26f}, {0x1.9e8632p+0f, -0x1.873738p-26f}, {0x1.9fa5e8p+0f, 0x1.a0fe54p-25f},
    {0x1.a0c668p+0f, -0x1.2886a6p-26f}, {0x1.a1e7aep+0f, 0x1.b1d718p-25f}, {0x1.a309bep+0f, 0x1.8945a6p-25f},
    {0x1.a42c98p+0f, 0x1.182b5ep-30f}, {0x1.a5503cp+0f, -0x1.b83b54p-25f}, {0x1.a674a8p+0f, 0x1.5e8c0ap-25f},
    {0x1.a799e2p+0f, -0x1.99e994p-25f}, {0x1.a8bfe6p+0f, -0x1.87da34p-25f}, {0x1.a9e6b6p+0f, -0x1.50c048p-25f},
    {0x1.ab0e52p+0f, 0x1.356ebap-28f}, {0x1.ac36bcp+0f, -0x1.606432p-31f}, {0x1.ad5ff4p+0f, -0x1.70f622p-26f},
    {0x1.ae89fap+0f, -0x1.a94b14p-26f}, {0x1.afb4cep+0f, 0x1.88bccp-26f}, {0x1.b0e072p+0f, 0x1.31b6ccp-25f},
    {0x1.b20ce6p+0f, 0x1.93512ap-25f}, {0x1.b33a2cp+0f, -0x1.ec3a82p-26f}, {0x1.b46842p+0f, -0x1.4916cap-25f},
    {0x1.b59728p+0f, 0x1.bcab28p-25f}, {0x1.b6c6e2p+0f, 0x1.3e38a6p-25f}, {0x1.b7f77p+0f, -0x1.a09438p-25f},
    {0x1.b928dp+0f, -0x1.bb16c4p-25f}, {0x1.ba5b04p+0f, -0x1.ebdf36p-25f}, {0x1.bb8e0cp+0f, -0x1.0cb21cp-25f},
    {0x1.bcc1eap+0f, -0x1.f687c6p-25f}, {0x1.bdf69cp+0f, 0x1.f9d104p-27f}, {0x1.bf2c26p+0f, -0x1.0a387ep-26f},
    {0x1.c06286p+0f, 0x1.41b33cp-28f}, {0x1.c199bep+0f, -0x1.3d56b2p-27f}, {0x1.c2d1cep+0f, -0x1.8166b6p-26f},
    {0x1.c40ab6p+0f, -0x1.7c2c98p-39f}, {0x1.c54478p+0f, -0x1.c14138p-26f}, {0x1.c67f12p+0f, 0x1.cafa2ap-25f},
    {0x1.c7ba88p+0f, 0x1.311926p-25f}, {0x1.c8f6dap+0f, -0x1.7f230ap-25f}, {0x1.ca3406p+0f, -0x1.15c764p-25f},
    {0x1.cb720ep+0f, -0x1.8837ccp-27f}, {0x1.ccb0f2p+0f, 0x1.cda2cep-25f}, {0x1.cdf0b6p+0f, -0x1.54478p-25f},
    {0x1.cf3156p+0f, -0x1.291524p-26f}, {0x1.d072d4p+0f, 0x1.40f13p-25f}, {0x1.d1b532p+0f, 0x1.61192ep-25f},
    {0x1.d2f87p+0f, 0x1.01b13ep-25f}, {0x1.d43c8ep+0f, 0x1.59543ap-25f}, {0x1.d5818ep+0f, -0x1.822dbcp-27f},
    {0x1.d6c76ep+0f, 0x1.0c5cdap-25f}, {0x1.d80e32p+0f, -0x1.26cf8ep-25f}, {0x1.d955d8p+0f, -0x1.c013f2p-25f},
    {0x1.da9e6p+0f, 0x1.ed9942p-27f}, {0x1.dbe7cep+0f, -0x1.38af9ep-25f}, {0x1.dd322p+0f, -0x1.9fc974p-25f},
    {0x1.de7d56p+0f, 0x1.070196p-26f}, {0x1.dfc974p+0f, -0x1.908c94p-25f}, {0x1.e11676p+0f, 0x1.632fa2p-25f},
    {0x1.e26462p+0f, -0x1.614bdap-25f}, {0x1.e3b334p+0f, -0x1.3a447cp-26f}, {0x1.e502eep+0f, 0x1.e2cffep-26f},
    {0x1.e65392p+0f, 0x1.19db5ep-26f}, {0x1.e7a52p+0f, -0x1.0e2cep-26f}, {0x1.e8f798p+0f, -0x1.064918p-25f},
    {0x1.ea4afap+0f, 0x1.52486cp-27f}, {0x1.eb9f48p+0f, 0x1.9f329cp-26f}, {0x1.ecf482p+0f, 0x1.b1ccfep-25f},
    {0x1.ee4aaap+0f, 0x1.0c4288p-27f}, {0x1.efa1bep+0f, 0x1.cc2b44p-25f}, {0x1.f0f9c2p+0f, -0x1.a4df6cp-27f},
    {0x1.f252b4p+0f, -0x1.1288aep-25f}, {0x1.f3ac94p+0f, 0x1.1bae4ep-25f}, {0x1.f50766p+0f, -0x1.246ebp-26f},
    {0x1.f66328p+0f, -0x1.9deec2p-26f}, {0x1.f7bfdap+0f, 0x1.b397c2p-25f}, {0x1.f91d8p+0f, 0x1.121e44p-27f},
    {0x1.fa7c18p+0f, 0x1.9e90d8p-28f}, {0x1.fbdba4p+0f, -0x1.2da55ep-25f}, {0x1.fd3c22p+0f, 0x1.71ee3ep-25f},
    {0x1.fe9d96p+0f, 0x1.65447cp-25f},
};

// A table of 2^(j/256) pairs read through table(j): PairTableGlobal reads kExp2PairTable;
// topk_logprobs keeps interleaved copies in shared memory (its own reader).
struct PairTableGlobal {
  KD_DEVICE FloatPair operator()(uint32_t j) const { return kExp2PairTable[j]; }
};

// A table in shared memory as interleaved copies (entry j's copies from byte j << Shift, copy c
// 8c bytes on: the lanes of a half-warp read distinct banks), read at the caller's copy. `lane`:
// the table's shared-memory address plus the caller's copy's bytes (on the emulator, a plain
// pointer); the address formed in PTX (one shift-and-add: nvcc keeps base and lane apart).
template <int Shift>
struct PairTableShared {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  uint32_t lane;
  KD_DEVICE PairTableShared(const FloatPair* table, int lane_bytes)
      : lane(static_cast<uint32_t>(__cvta_generic_to_shared(table)) + static_cast<uint32_t>(lane_bytes)) {}
  KD_DEVICE FloatPair operator()(uint32_t j) const {
    uint32_t addr;
    asm("{ .reg .b32 t; shl.b32 t, %1, %2; add.u32 %0, t, %3; }" : "=r"(addr) : "r"(j), "n"(Shift), "r"(lane));
    float hi, lo;
    // volatile: it reads memory (the table, written before a barrier), so it stays after that
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(hi), "=f"(lo) : "r"(addr));
    return {hi, lo};
  }
#else
  const char* lane;
  KD_DEVICE PairTableShared(const FloatPair* table, int lane_bytes) : lane(reinterpret_cast<const char*>(table) + lane_bytes) {}
  KD_DEVICE FloatPair operator()(uint32_t j) const {
    return *reinterpret_cast<const FloatPair*>(lane + (static_cast<uintptr_t>(j) << Shift));
  }
#endif
};

// The rounding constant that makes exp_pair_scaled return e^x 2^-mk (|mk| < 2^13).
KD_HOST_DEVICE constexpr float exp_pair_round(int mk) {
  return kExpPairRound - static_cast<float>(mk) * static_cast<float>(kExpPairTableSize);
}

// (th + tl) e^(rh + rl) for |rh + rl| <= ~ln2/512, as a pair
KD_DEVICE FloatPair exp_pair_reduced(float rh, float rl, FloatPair t) {
  const float half = __fmul_rn(0.5f, rh);
  const float a2 = __fmul_rn(rh, half);  // rh^2/2 and its rounding error (exact)
  const float a2e = fmaf(rh, half, -a2);
  // r^3/6 + r^4/24 = (r^2/2) r (1/3 + r/12); the cross term rh rl of r^2/2; rl
  const float cubic = __fmul_rn(__fmul_rn(a2, rh), fmaf(rh, 0x1.555556p-4f, 0x1.555556p-2f));
  const float small = __fadd_rn(rl, __fadd_rn(a2e, fmaf(rh, rl, cubic)));
  const FloatPair e = fast_two_sum(rh, a2);  // e^r - 1 = e.hi + em1_lo
  const float em1_lo = __fadd_rn(e.lo, small);
  const float m = __fmul_rn(t.hi, e.hi);  // t (1 + e^r - 1)
  const float me = fmaf(t.hi, e.hi, -m);
  const float low = __fadd_rn(t.lo, fmaf(t.hi, em1_lo, fmaf(t.lo, e.hi, me)));
  const FloatPair h = fast_two_sum(t.hi, m);  // t.hi in [1, 2), |m| < t.hi
  return {h.hi, __fadd_rn(h.lo, low)};
}

// e^(x + xl) 2^-mk for |x| < kExpPairMaxAbs, |xl| < 2^-12 (it joins r exactly), e^(x + xl) 2^-mk within
// [e^-kExpPairRange, 2^127): `round` = exp_pair_round(mk). WithLow false: xl is 0 (one add fewer).
template <bool WithLow = true, class Table>
KD_DEVICE FloatPair exp_pair_scaled(float x, float xl, float round, const Table& table) {
  const float shifted = fmaf(x, kExpPairInvStep, round);
  const float q = __fadd_rn(shifted, -round);
  const int qs = __float_as_int(shifted) - kExpPairRoundBits;  // q - 256 mk, two's complement
  const float r1 = fmaf(-q, kExpPairStep1, x);                 // exact
  const float p = __fmul_rn(q, kExpPairStep2);
  const float pe = fmaf(q, kExpPairStep2, -p);
  FloatPair r = two_sum(r1, -p);
  if constexpr (WithLow) {  // xl, up to 2^-18 for |x| < 128, joins exactly
    const FloatPair t = two_sum(r.hi, xl);
    r = FloatPair(t.hi, __fadd_rn(t.lo, r.lo));
  }
  const float rl = __fadd_rn(r.lo, -fmaf(q, kExpPairStep3, pe));
  const FloatPair e = exp_pair_reduced(r.hi, rl, table(static_cast<uint32_t>(qs) & (kExpPairTableSize - 1u)));
  return pair_scale(e, __int_as_float(((qs >> kExpPairBits) + 127) << 23));
}

// e^d for a pair d <= ~0 (-inf included); 0 below -kExpPairRange (such a term is under 2^-115
// of a sum that holds e^0).
template <class Table>
KD_DEVICE FloatPair exp_pair(FloatPair d, const Table& table) {
  if (!(d.hi > -kExpPairRange)) return {0.0f, 0.0f};
  return exp_pair_scaled(d.hi, d.lo, kExpPairRound, table);
}

// log(a) for a pair a >= ~1 (a sum that holds e^0): logf, then one Newton step in pairs:
// log a = y0 + log(a e^-y0), a e^-y0 = 1 + z, log(1 + z) = z - z^2/2 (|z| < 2^-18: z^3/3 < 2^-54).
template <class Table>
KD_DEVICE FloatPair pair_log(FloatPair a, const Table& table) {
  const float y0 = logf(a.hi);
  const FloatPair p = pair_mul(a, exp_pair_scaled<false>(-y0, 0.0f, kExpPairRound, table));
  const float z = __fadd_rn(__fadd_rn(p.hi, -1.0f), p.lo);  // p.hi - 1 is exact (p.hi near 1)
  const FloatPair s = two_sum(y0, z);
  return fast_two_sum(s.hi, __fadd_rn(s.lo, -__fmul_rn(0.5f, __fmul_rn(z, z))));
}

// hi + lo rounded to float64's 53 bits (nearest, ties to even), still as a pair: the lse as
// topk.py holds it, so that a tail below float64's resolution (a log of 1 + 1e-28, say) moves
// no logp. lo is rounded to a multiple of u = ulp53(hi) (hi's bits are a multiple of 2u: the
// tie's parity is lo's); u / 2 below a power-of-two hi when lo < 0. Unchanged where u would be
// subnormal (|hi| < 2^-74) or hi is 0.
KD_DEVICE FloatPair pair_round_to_double(FloatPair a) {
  const uint32_t bits = static_cast<uint32_t>(__float_as_int(a.hi));
  const int e = static_cast<int>((bits >> 23) & 0xffu) - 127;  // hi = +-2^e * 1.f
  if (a.hi == 0.0f || e < -74 || !(fabsf(a.hi) < INFINITY)) return a;
  const bool below = (bits & 0x7fffffu) == 0 && (a.lo < 0.0f) == (a.hi > 0.0f);  // the binade under a power of two
  const int inv_u_exp = 52 - e + (below ? 1 : 0);
  const float inv_u = __int_as_float((inv_u_exp + 127) << 23), u = __int_as_float((127 - inv_u_exp) << 23);
  return {a.hi, __fmul_rn(rintf(__fmul_rn(a.lo, inv_u)), u)};
}

// float32(x - lse) for a pair lse, as python_engine/ddtree/topk.py rounds x - lse (float64)
// once: x - lse.hi split exactly, the rest added in one rounding.
KD_DEVICE float logp_of_pair(float x, FloatPair lse) {
  const FloatPair s = two_sum(x, -lse.hi);
  if (!(fabsf(s.hi) < INFINITY)) return s.hi;  // x = -inf (or a row with no finite logit)
  return __fadd_rn(s.hi, __fadd_rn(s.lo, -lse.lo));
}

}  // namespace kdtree::kern
