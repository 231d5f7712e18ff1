// Small helpers shared by the kernel tests of the newer operators.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/simd.h"
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

// n values of storage type T (Float16 and BFloat16 rounded from double).
template <typename T>
std::vector<T> RandomOf(int64_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(n));
  for (double v : Random<double>(n, seed, lo, hi)) out.push_back(FromDouble<T>(v));
  return out;
}

// The relative tolerance of a float32 or float64 kernel against a long
// double reference.
template <typename T>
constexpr double RelTol() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

// "float" or "double", for messages.
template <typename T>
constexpr const char* TypeName() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  return std::is_same_v<T, float> ? "float" : "double";
}

// Expects grad[i] to be d loss() / d v[i] within `tol` for every i, by
// central differences of step h: v[i] is moved by +h and -h in place (and
// restored), and loss() reads v. `what` names the gradient in a failure.
template <typename Loss>
void ExpectGradient(const std::vector<double>& grad, std::vector<double>& v, Loss&& loss, double h,
                    double tol, const std::string& what) {
  ASSERT_EQ(grad.size(), v.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const long double up = loss();
    v[i] = saved - h;
    const long double down = loss();
    v[i] = saved;
    EXPECT_NEAR(grad[i], static_cast<double>((up - down) / (2.0L * h)), tol) << what << "[" << i << "]";
  }
}

// Forces one SIMD target (one of SimdTargets()) for the scope, then restores
// the default: a test that checks every target on this CPU.
struct ForcedTarget {
  explicit ForcedTarget(const std::string& name) { EXPECT_TRUE(SetSimdTarget(name).ok()) << name; }
  ~ForcedTarget() { SetSimdTarget("").ok(); }
};

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
