// The rotation of one pair, shared by the rope kernel and the fused MLA cache write
// (mla_cache.cu), so both round exactly alike.
#pragma once

#include "model_dtype.cuh"

namespace kdtree::kern {

// cos/sin of position * inv_freq, scaled, rounded to T (as the reference's cos_sin).
template <class T>
KD_DEVICE void rope_cos_sin(int position, float inv_freq, float attention_factor, float* c, float* s) {
  const float freq = static_cast<float>(position) * inv_freq;
  *c = round_to<T>(cosf(freq) * attention_factor);
  *s = round_to<T>(sinf(freq) * attention_factor);
}

// Pair i of a head: reads x (dim values), writes out[i] and out[i + dim/2].
template <class T>
KD_DEVICE void rope_pair(const T* x, T* out, int i, int dim, bool interleave, float c, float s) {
  const int half = dim / 2;
  const float a = to_f32(interleave ? x[2 * i] : x[i]);
  const float b = to_f32(interleave ? x[2 * i + 1] : x[i + half]);
  out[i] = from_f32<T>(a * c - b * s);
  out[i + half] = from_f32<T>(b * c + a * s);
}

}  // namespace kdtree::kern
