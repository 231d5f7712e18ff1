#include "ops/bias_gelu/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/bias_gelu/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

double Gelu(double v, bool use_tanh) {
  if (use_tanh) return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
}

template <typename T>
void CheckForward(bool use_tanh, double tol) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {4, 9}, {2, 5000}, {700, 3}}) {
    const auto x = Random<T>(rows * cols, 1, -6.0, 6.0), b = Random<T>(cols, 2);
    std::vector<T> y(x.size());
    BiasGeluForward<T>(x.data(), b.data(), y.data(), rows, cols, BiasGeluAttrs{use_tanh}, SerialFor);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want[i] = Gelu(static_cast<double>(x[i] + b[i % static_cast<size_t>(cols)]), use_tanh);
    }
    testing::ExpectNear(y, want, tol, use_tanh ? "tanh" : "erf");
  }
}

TEST(BiasGeluKernel, ForwardFloat) {
  CheckForward<float>(false, 1e-6);
  CheckForward<float>(true, 1e-6);
}
TEST(BiasGeluKernel, ForwardDouble) {
  CheckForward<double>(false, 1e-14);
  CheckForward<double>(true, 1e-14);
}

TEST(BiasGeluKernel, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, cols = 4;
  for (bool use_tanh : {false, true}) {
    const auto x = Random<double>(rows * cols, 3, -4.0, 4.0), b = Random<double>(cols, 4);
    const auto g = Random<double>(rows * cols, 5);
    std::vector<double> gx(x.size()), gb(cols);
    BiasGeluBackward<double>(g.data(), x.data(), b.data(), gx.data(), gb.data(), rows, cols,
                             BiasGeluAttrs{use_tanh}, SerialFor);
    const double h = 1e-6;
    std::vector<double> want_gb(cols, 0.0);
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i] + b[i % static_cast<size_t>(cols)];
      const double d = g[i] * (Gelu(v + h, use_tanh) - Gelu(v - h, use_tanh)) / (2 * h);
      EXPECT_NEAR(gx[i], d, 1e-7) << i;
      want_gb[i % static_cast<size_t>(cols)] += d;
    }
    for (int64_t j = 0; j < cols; ++j) EXPECT_NEAR(gb[j], want_gb[j], 1e-6) << j;
  }
}

TEST(BiasGeluKernel, BitwiseDeterministicAcrossParallelFor) {
  const int64_t rows = 400, cols = 129;
  const auto x = Random<float>(rows * cols, 6), b = Random<float>(cols, 7), g = Random<float>(rows * cols, 8);
  std::vector<float> gx0(x.size()), gb0(cols), gx1(x.size()), gb1(cols);
  BiasGeluBackward<float>(g.data(), x.data(), b.data(), gx0.data(), gb0.data(), rows, cols,
                          BiasGeluAttrs{false}, SerialFor);
  BiasGeluBackward<float>(g.data(), x.data(), b.data(), gx1.data(), gb1.data(), rows, cols,
                          BiasGeluAttrs{false}, testing::ReverseChunkedFor(1));
  EXPECT_EQ(std::memcmp(gb0.data(), gb1.data(), gb0.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gx0.data(), gx1.data(), gx0.size() * sizeof(float)), 0);
}

TEST(BiasGeluInfer, RejectsUnknownApproximate) {
  std::vector<TensorInfo> outputs;
  const Status status = InferBiasGeluAttrs({Info("float32", {2, 8}), Info("float32", {8})},
                                           {AttrValue(std::string("fast"))}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'approximate' must be 'none' or 'tanh', got 'fast'"))
      << status.message();
}

TEST(BiasGeluInfer, RejectsBiasOfWrongLength) {
  std::vector<TensorInfo> outputs;
  const Status status = InferBiasGelu({Info("float64", {2, 8}), Info("float64", {4})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'bias' must be 1-D with 8 elements")) << status.message();
}

}  // namespace
}  // namespace opbridge
