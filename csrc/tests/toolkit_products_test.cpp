// The toolkit's small products (opbridge/toolkit/products-inl.h) against
// double on every SIMD target this CPU runs, in each storage type: RowDots
// for 0 to 9 rows (the blocks of four and the rest) of lengths that end in
// partial vectors, and AddScaledRows, within the bound products-inl.h
// documents: cols * eps * sum |terms| (eps 2^-24 for float32 and the 16-bit
// types, 2^-53 for float64).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/toolkit_products_test.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/toolkit/products-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

template <typename T>
void DotsImpl(const T* a, const T* b, int64_t rows, int64_t cols, double* out) {
  tk::RowDots(a, b, rows, cols, out);
}
template <typename T>
void ScaledImpl(const double* w, const T* x, int64_t rows, int64_t cols, ComputeType<T>* out) {
  tk::AddScaledRows(w, x, rows, cols, out);
}

}  // namespace

#define OPBRIDGE_PRODUCTS_TEST_ENTRY(SUFFIX, T)                                                       \
  void Dots##SUFFIX(const T* a, const T* b, int64_t rows, int64_t cols, double* out) {                \
    DotsImpl(a, b, rows, cols, out);                                                                  \
  }                                                                                                   \
  void Scaled##SUFFIX(const double* w, const T* x, int64_t rows, int64_t cols, ComputeType<T>* out) { \
    ScaledImpl(w, x, rows, cols, out);                                                                \
  }
OPBRIDGE_PRODUCTS_TEST_ENTRY(F32, float)
OPBRIDGE_PRODUCTS_TEST_ENTRY(F64, double)
OPBRIDGE_PRODUCTS_TEST_ENTRY(F16, Float16)
OPBRIDGE_PRODUCTS_TEST_ENTRY(BF16, BFloat16)
#undef OPBRIDGE_PRODUCTS_TEST_ENTRY

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "opbridge/simd.h"
#include "tests/test_util.h"

namespace opbridge {

HWY_EXPORT(DotsF32);
HWY_EXPORT(DotsF64);
HWY_EXPORT(DotsF16);
HWY_EXPORT(DotsBF16);
HWY_EXPORT(ScaledF32);
HWY_EXPORT(ScaledF64);
HWY_EXPORT(ScaledF16);
HWY_EXPORT(ScaledBF16);

namespace {

template <typename T>
void Dots(const T* a, const T* b, int64_t rows, int64_t cols, double* out) {
  if constexpr (std::is_same_v<T, float>) OPBRIDGE_DYNAMIC_DISPATCH(DotsF32)(a, b, rows, cols, out);
  if constexpr (std::is_same_v<T, double>) OPBRIDGE_DYNAMIC_DISPATCH(DotsF64)(a, b, rows, cols, out);
  if constexpr (std::is_same_v<T, Float16>) OPBRIDGE_DYNAMIC_DISPATCH(DotsF16)(a, b, rows, cols, out);
  if constexpr (std::is_same_v<T, BFloat16>) OPBRIDGE_DYNAMIC_DISPATCH(DotsBF16)(a, b, rows, cols, out);
}
template <typename T>
void Scaled(const double* w, const T* x, int64_t rows, int64_t cols, ComputeType<T>* out) {
  if constexpr (std::is_same_v<T, float>) OPBRIDGE_DYNAMIC_DISPATCH(ScaledF32)(w, x, rows, cols, out);
  if constexpr (std::is_same_v<T, double>) OPBRIDGE_DYNAMIC_DISPATCH(ScaledF64)(w, x, rows, cols, out);
  if constexpr (std::is_same_v<T, Float16>) OPBRIDGE_DYNAMIC_DISPATCH(ScaledF16)(w, x, rows, cols, out);
  if constexpr (std::is_same_v<T, BFloat16>) OPBRIDGE_DYNAMIC_DISPATCH(ScaledBF16)(w, x, rows, cols, out);
}

using opbridge::testing::ForcedTarget;

template <typename T>
void CheckProducts(const char* type) {
  const double eps = std::is_same_v<T, double> ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  std::mt19937 gen(3);
  std::normal_distribution<double> normal;
  for (const std::string& target : SimdTargets()) {
    ForcedTarget forced(target);
    for (int64_t cols : {1, 3, 8, 17, 64, 100, 1000}) {
      for (int64_t rows = 0; rows <= 9; ++rows) {
        std::vector<T> a(static_cast<size_t>(cols)), b(static_cast<size_t>(rows * cols));
        for (T& v : a) v = FromDouble<T>(normal(gen));
        for (T& v : b) v = FromDouble<T>(normal(gen));
        std::vector<double> w(static_cast<size_t>(rows));
        for (double& v : w) v = normal(gen);
        std::vector<double> dots(static_cast<size_t>(rows) + 1, -7.0);
        Dots(a.data(), b.data(), rows, cols, dots.data());
        EXPECT_EQ(dots[static_cast<size_t>(rows)], -7.0) << "wrote past rows";
        for (int64_t j = 0; j < rows; ++j) {
          double want = 0.0, magnitude = 0.0;
          for (int64_t k = 0; k < cols; ++k) {
            const double term = static_cast<double>(ToFloat(a[static_cast<size_t>(k)])) *
                                static_cast<double>(ToFloat(b[static_cast<size_t>(j * cols + k)]));
            want += term;
            magnitude += std::fabs(term);
          }
          EXPECT_NEAR(dots[static_cast<size_t>(j)], want, static_cast<double>(cols) * eps * magnitude)
              << "RowDots " << type << " on " << target << ": row " << j << " of " << rows << ", cols "
              << cols;
        }
        std::vector<ComputeType<T>> sums(static_cast<size_t>(cols), ComputeType<T>(1));
        Scaled(w.data(), b.data(), rows, cols, sums.data());
        for (int64_t k = 0; k < cols; ++k) {
          double want = 1.0, magnitude = 1.0;
          for (int64_t j = 0; j < rows; ++j) {
            const double term = w[static_cast<size_t>(j)] *
                                static_cast<double>(ToFloat(b[static_cast<size_t>(j * cols + k)]));
            want += term;
            magnitude += std::fabs(term);
          }
          EXPECT_NEAR(static_cast<double>(sums[static_cast<size_t>(k)]), want,
                      static_cast<double>(rows + 1) * 2 * eps * magnitude)
              << "AddScaledRows " << type << " on " << target << ": column " << k << " of " << cols
              << ", rows " << rows;
        }
      }
    }
  }
}

TEST(ToolkitProducts, WithinTheDocumentedBoundOnEveryTargetFloat) { CheckProducts<float>("float32"); }
TEST(ToolkitProducts, WithinTheDocumentedBoundOnEveryTargetDouble) { CheckProducts<double>("float64"); }
TEST(ToolkitProducts, WithinTheDocumentedBoundOnEveryTargetFloat16) { CheckProducts<Float16>("float16"); }
TEST(ToolkitProducts, WithinTheDocumentedBoundOnEveryTargetBFloat16) { CheckProducts<BFloat16>("bfloat16"); }

}  // namespace
}  // namespace opbridge
#endif  // HWY_ONCE
