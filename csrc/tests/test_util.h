// Small helpers shared by the kernel tests of the newer operators.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge::testing {

template <typename T>
std::vector<T> Random(int64_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<T>(dist(gen));
  return v;
}

// Calls body on chunks of `chunk` elements (`grain` when 0), last chunk
// first: a parallel runtime may run them in any order.
inline ParallelFor ReverseChunkedFor(int64_t chunk) {
  return [chunk](int64_t n, int64_t grain, const RangeBody& body) {
    if (n <= 0) return;
    const int64_t step = std::max<int64_t>(1, chunk > 0 ? chunk : grain);
    for (int64_t begin = ((n - 1) / step) * step; begin >= 0; begin -= step)
      body(begin, std::min(n, begin + step));
  };
}

template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::fabs(want[i]))) && ++failures <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << static_cast<double>(got[i]) << ", expected "
                    << want[i];
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

inline TensorInfo Info(const char* dtype, Shape shape) { return TensorInfo{true, dtype, std::move(shape)}; }
inline TensorInfo Absent() { return TensorInfo{false, "", {}}; }

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace opbridge::testing
