// exp(d) in float64 for d <= 0, about one ulp, in ~11 float64 operations instead of the
// ~20 of the library's exp(): topk_logprobs evaluates one per logit, and at 4 TB/s of
// logits the FP64 pipe, not memory, would otherwise set its speed.
//
//   d = q ln2/64 + r, |r| <= ln2/128  ->  e^d = 2^(q >> 6) * 2^((q & 63)/64) * e^r
//   2^(j/64): a 64-entry table (correctly rounded); e^r: Taylor to r^5 (error < r^6/720 =
//   3.5e-17 relative); ln2/64 in two parts (Cody-Waite) so q * ln2/64 is exact.
#pragma once

#include "device_compat.cuh"

namespace kdtree::kern {

constexpr int kExp2TableSize = 64;

// 2^(j/64), j = 0..63, correctly rounded (computed with 60-digit decimal arithmetic).
KD_DEVICE_TABLE double kExp2Table[kExp2TableSize] = {
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, 0x1.0874518759bc8p+0,
    0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, 0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0,
    0x1.172b83c7d517bp+0, 0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0,
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, 0x1.2d285a6e4030bp+0,
    0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, 0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0,
    0x1.3dea64c123422p+0, 0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0,
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, 0x1.56f4736b527dap+0,
    0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, 0x1.6247eb03a5585p+0, 0x1.6623882552225p+0,
    0x1.6a09e667f3bcdp+0, 0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0,
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, 0x1.868d99b4492edp+0,
    0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, 0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0,
    0x1.9c49182a3f090p+0, 0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0,
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, 0x1.bcc1e904bc1d2p+0,
    0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, 0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0,
    0x1.d5818dcfba487p+0, 0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0,
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, 0x1.fa7c1819e90d8p+0,
};

// kExp2Table[j] with (j << 14) taken from its high word (mod 2^32): adding qi << 14 to that
// word then adds (qi >> 6) << 20, the power of two, in one integer multiply-add.
constexpr int kExp2PreShift = 14;  // 20 (the exponent field's place) - 6 (log2 of the table size)
KD_DEVICE double exp2_table_preshifted(int j) {
  const double e = kExp2Table[j];
  return __hiloint2double(static_cast<int>(static_cast<uint32_t>(__double2hiint(e)) - (static_cast<uint32_t>(j) << kExp2PreShift)),
                          __double2loint(e));
}

// e^d for -708 < d <= 0, without the range check: the caller has clamped d. Entry j of the
// table is read at byte (j << TableShift) + lane_bytes of `table` (TableShift > 3: copies
// interleaved so that the lanes of a half-warp read distinct shared-memory banks; lane_bytes
// must be below 1 << TableShift, it is OR-ed in). PreShifted: the entries are
// exp2_table_preshifted(j), else kExp2Table[j].
template <int TableShift = 3, bool PreShifted = false>
KD_DEVICE double exp_nonpositive_in_range(double d, const double* table, int lane_bytes = 0) {
  constexpr double kInvLn2x64 = 0x1.71547652b82fep+6;  // 64 / ln 2
  constexpr double kRound = 0x1.8p52;                  // adding it rounds to an integer held in the low bits
  constexpr double kLn2HiOver64 = 0x1.62e42feep-7;     // ln2/64, high part: q * it is exact for |q| < 2^21
  constexpr double kLn2LoOver64 = 0x1.a39ef35793c76p-39;  // ln2/64 - high part
  const double shifted = fma(d, kInvLn2x64, kRound);
  const double q = shifted - kRound;
  const int qi = __double2loint(shifted);  // q, two's complement
  double r = fma(-q, kLn2HiOver64, d);
  r = fma(-q, kLn2LoOver64, r);
  double p = fma(r, 1.0 / 120.0, 1.0 / 24.0);
  p = fma(p, r, 1.0 / 6.0);
  p = fma(p, r, 0.5);
  p = fma(p, r, 1.0);
  const double em1 = p * r;  // e^r - 1, small: its rounding error hardly reaches the result
  // 2^(qi >> 6) * table[qi & 63]: add the power to the table entry's exponent field (high word)
  const int offset = static_cast<int>((static_cast<uint32_t>(qi) << TableShift) & ((kExp2TableSize - 1u) << TableShift)) | lane_bytes;
  const double entry = *reinterpret_cast<const double*>(reinterpret_cast<const char*>(table) + offset);
  const uint32_t power = PreShifted ? static_cast<uint32_t>(qi) << kExp2PreShift : static_cast<uint32_t>(qi >> 6) << 20;
  const double t = __hiloint2double(static_cast<int>(static_cast<uint32_t>(__double2hiint(entry)) + power), __double2loint(entry));
  return fma(t, em1, t);
}

// e^d for d <= 0 (-inf included). `table` is kExp2Table, copied where reads are cheap
// (shared memory in the kernel). Below -708 the result is taken as 0: such a term is under
// 1e-307 of a sum that is at least 1.
template <int TableShift = 3, bool PreShifted = false>
KD_DEVICE double exp_nonpositive(double d, const double* table, int lane_bytes = 0) {
  if (!(d > -708.0)) return 0.0;
  return exp_nonpositive_in_range<TableShift, PreShifted>(d, table, lane_bytes);
}

}  // namespace kdtree::kern
