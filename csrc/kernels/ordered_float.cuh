// float <-> uint32 mapping whose unsigned order is the float order (-inf lowest; NaNs fall
// outside [-inf, +inf]), for radix selection and bisection over floats.
#pragma once

#include "device_compat.cuh"

namespace kdtree::kern {

KD_DEVICE uint32_t float_to_ordered(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

KD_DEVICE float ordered_to_float(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

}  // namespace kdtree::kern
