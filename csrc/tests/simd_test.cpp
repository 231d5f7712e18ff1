// Every SIMD target compiled in and supported by this CPU, forced one at a
// time, against scalar references; and the 16-bit conversions.
#include "opbridge/simd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "ops/rms_norm/kernel.h"
#include "ops/scaled_clamp/kernel.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

// Restores the default target when a test ends, pass or fail.
using opbridge::testing::ForcedTarget;

template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, Float16>) return 2e-3;
  return 1.6e-2;  // bfloat16: 8 significant bits
}

// rms_norm forward with bias, rows whose length is not a multiple of any
// vector width, against a double computation on the same (rounded) inputs.
template <typename T>
void CheckRmsNorm(const std::string& target) {
  const int64_t rows = 3, cols = 1037;
  const auto x = testing::RandomOf<T>(rows * cols, 1, -2.0, 2.0);
  const auto w = testing::RandomOf<T>(cols, 2, 0.5, 1.5);
  const auto b = testing::RandomOf<T>(cols, 3, -0.5, 0.5);
  std::vector<T> y(x.size());
  const ParallelFor serial = SerialFor;
  RmsNormForward<T>(x.data(), w.data(), b.data(), y.data(), rows, cols, RmsNormAttrs{1e-6}, serial);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += std::pow(static_cast<double>(ToFloat(x[r * cols + j])), 2);
    const double rstd = 1.0 / std::sqrt(sum / cols + 1e-6);
    for (int64_t j = 0; j < cols; ++j) {
      const double want = ToFloat(x[r * cols + j]) * rstd * ToFloat(w[j]) + ToFloat(b[j]);
      const double got = ToFloat(y[r * cols + j]);
      ASSERT_NEAR(got, want, Tolerance<T>() * (1.0 + std::fabs(want)))
          << target << " row " << r << " col " << j;
    }
  }
}

template <typename T>
void CheckScaledClamp(const std::string& target) {
  const int64_t n = 1001;
  const auto x = testing::RandomOf<T>(n, 4, -8.0, 16.0);
  std::vector<T> y(x.size()), g(x.size()), dx(x.size());
  for (auto& e : g) e = FromFloat<T>(1.0f);
  const ParallelFor serial = SerialFor;
  const ScaledClampAttrs attrs{0.5, 0.0, 6.0};
  ScaledClampForward<T>(x.data(), y.data(), n, attrs, serial);
  ScaledClampBackward<T>(g.data(), x.data(), dx.data(), n, attrs, serial);
  for (int64_t i = 0; i < n; ++i) {
    const double v = 0.5 * ToFloat(x[i]);
    const double want = v < 0.0 ? 0.0 : (v > 6.0 ? 6.0 : v);
    ASSERT_NEAR(ToFloat(y[i]), want, Tolerance<T>() * (1.0 + want)) << target << " at " << i;
    ASSERT_EQ(ToFloat(dx[i]), (v >= 0.0 && v <= 6.0) ? 0.5 : 0.0) << target << " at " << i;
  }
}

TEST(Simd, TargetsAreListedBestFirstAndCanBeForced) {
  const std::vector<std::string> targets = SimdTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(SimdTarget(), SimdDefaultTarget());
  EXPECT_NE(std::find(targets.begin(), targets.end(), SimdDefaultTarget()), targets.end());
  {
    ForcedTarget forced(targets.back());
    EXPECT_EQ(SimdTarget(), targets.back());
    EXPECT_EQ(SimdTargets(), targets) << "listing must not depend on the forced target";
  }
  EXPECT_EQ(SimdTarget(), SimdDefaultTarget());
}

TEST(Simd, UnknownTargetIsRejectedByName) {
  const Status status = SetSimdTarget("NO_SUCH_ISA");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("NO_SUCH_ISA"), std::string::npos) << status.message();
  EXPECT_EQ(SimdTarget(), SimdDefaultTarget());
}

TEST(Simd, EveryTargetMatchesTheReference) {
  for (const std::string& target : SimdTargets()) {
    ForcedTarget forced(target);
    CheckRmsNorm<float>(target);
    CheckRmsNorm<double>(target);
    CheckRmsNorm<Float16>(target);
    CheckRmsNorm<BFloat16>(target);
    CheckScaledClamp<float>(target);
    CheckScaledClamp<double>(target);
    CheckScaledClamp<Float16>(target);
    CheckScaledClamp<BFloat16>(target);
  }
}

TEST(Half, ConversionsRoundToNearestEven) {
  EXPECT_EQ(ToBFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(ToBFloat16(FloatBits(0x3F808000u)).bits, 0x3F80);  // tie to even (down)
  EXPECT_EQ(ToBFloat16(FloatBits(0x3F818000u)).bits, 0x3F82);  // tie to even (up)
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(NAN))));
  EXPECT_EQ(ToFloat16(1.0f).bits, 0x3C00);
  EXPECT_EQ(ToFloat16(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(ToFloat16(1e6f).bits, 0x7C00);
  EXPECT_EQ(ToFloat16(-2.0f).bits, 0xC000);
  EXPECT_EQ(ToFloat16(FloatBits(0x33800000u)).bits, 0x0001);  // smallest subnormal
  EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(NAN))));
  for (uint32_t bits = 0; bits < 0x7C00; bits += 7) {
    const Float16 h{static_cast<uint16_t>(bits)};
    EXPECT_EQ(ToFloat16(ToFloat(h)).bits, h.bits) << "float16 round trip of " << bits;
  }
}

}  // namespace
}  // namespace opbridge
