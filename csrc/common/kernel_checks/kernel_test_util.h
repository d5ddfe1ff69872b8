// Helpers shared by the kernel tests (GPU binaries and the CPU-emulated ones): array
// comparison that reports the first mismatches and the count, poison patterns, and tensor
// readers that check shapes before indexing.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/kdtr.h"
#include "common/test_harness.h"

namespace kdtree::test {

// Poison written over every output before a run: no kernel writes these values, so an
// element still holding one was never written.
constexpr int32_t kPoisonI32 = 0x5a5a5a5a;
constexpr uint32_t kPoisonU32 = 0xdeadbeefu;
inline float poison_f32() {
  const uint32_t bits = 0x7fc0dead;  // a quiet NaN with a payload
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// $KDTREE_SANITIZE_QUICK=1: skip the largest cases (compute-sanitizer runs are 10-1000x
// slower; the small cases exercise the same code paths).
inline bool quick_mode() {
  const char* v = std::getenv("KDTREE_SANITIZE_QUICK");
  return v && *v && *v != '0';
}

// Exact comparison of n elements; reports up to 5 mismatches with their index.
template <class T>
bool expect_equal_arrays(const std::string& what, const T* got, const T* want, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool same = got[i] == want[i];
    if (!same) {
      if (bad < 5)
        report_failure(nullptr, 0, what + "[" + std::to_string(i) + "]: got " + show(got[i]) + ", want " + show(want[i]));
      ++bad;
    }
  }
  if (bad > 5) report_failure(nullptr, 0, what + ": " + std::to_string(bad) + " mismatches in all");
  return bad == 0;
}

// Every element of got[0, n) equals `value` (padding checks).
template <class T>
bool expect_all(const std::string& what, const T* got, int64_t n, T value) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!(got[i] == value)) {
      if (bad < 3)
        report_failure(nullptr, 0, what + "[" + std::to_string(i) + "]: got " + show(got[i]) + ", want " + show(value));
      ++bad;
    }
  if (bad > 3) report_failure(nullptr, 0, what + ": " + std::to_string(bad) + " wrong in all");
  return bad == 0;
}

// The tensor `name` of a bundle, checked to have `ndim` dimensions.
inline const KdtrTensor& tensor(const KdtrFile& f, const std::string& name, size_t ndim) {
  const KdtrTensor& t = f.get(name);
  if (t.shape.size() != ndim && !(ndim == 1 && t.shape.empty()))
    throw KdtrError(f.path() + ": " + name + " has " + std::to_string(t.shape.size()) + " dimensions, expected " +
                    std::to_string(ndim));
  return t;
}

// A 1-element integer scalar stored as int32 or int64 (either is accepted).
inline int64_t scalar(const KdtrFile& f, const std::string& name) {
  const KdtrTensor& t = f.get(name);
  if (t.numel() < 1) throw KdtrError(f.path() + ": " + name + " is empty");
  if (t.dtype == DType::I64) return t.as<int64_t>()[0];
  return t.as<int32_t>()[0];
}

template <class T>
std::vector<T> to_vector(const KdtrTensor& t) {
  const T* p = t.as<T>();
  return std::vector<T>(p, p + t.numel());
}

}  // namespace kdtree::test
