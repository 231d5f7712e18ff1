#include "ops/add_rms_norm/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/add_rms_norm/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

// out and residual_out in long double, from x and residual as T.
template <typename T>
void Reference(const std::vector<T>& x, const std::vector<T>& r, const std::vector<T>& w, int64_t rows,
               int64_t cols, double eps, std::vector<double>* out, std::vector<double>* sum) {
  out->resize(x.size());
  sum->resize(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    long double ss = 0.0L;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      const T s = x[k] + r[k];
      (*sum)[k] = static_cast<double>(s);
      ss += static_cast<long double>(s) * s;
    }
    const long double rstd = 1.0L / std::sqrt(ss / cols + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      (*out)[k] = static_cast<double>((*sum)[k] * rstd * w[static_cast<size_t>(j)]);
    }
  }
}

template <typename T>
void CheckForward(double tol) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 4096}, {500, 3}}) {
    const auto x = Random<T>(rows * cols, 1), r = Random<T>(rows * cols, 2), w = Random<T>(cols, 3, 0.5, 1.5);
    std::vector<T> out(x.size()), sum(x.size());
    AddRmsNormForward<T>(x.data(), r.data(), w.data(), nullptr, out.data(), sum.data(), rows, cols,
                         AddRmsNormAttrs{1e-6}, SerialFor);
    std::vector<double> want_out, want_sum;
    Reference(x, r, w, rows, cols, 1e-6, &want_out, &want_sum);
    testing::ExpectNear(out, want_out, tol, "out");
    testing::ExpectNear(sum, want_sum, 0.0, "residual_out");
  }
}

TEST(AddRmsNormKernel, ForwardFloat) { CheckForward<float>(1e-6); }
TEST(AddRmsNormKernel, ForwardDouble) { CheckForward<double>(1e-13); }

TEST(AddRmsNormKernel, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 5;
  const double eps = 1e-6, h = 1e-6;
  auto x = Random<double>(rows * cols, 4);
  const auto r = Random<double>(rows * cols, 5);
  auto w = Random<double>(cols, 6, 0.5, 1.5), b = Random<double>(cols, 7);
  const auto g = Random<double>(rows * cols, 8), gr = Random<double>(rows * cols, 9);
  // Loss L = sum(g * out) + sum(gr * residual_out).
  auto loss = [&]() {
    std::vector<double> out(x.size()), sum(x.size());
    AddRmsNormForward<double>(x.data(), r.data(), w.data(), b.data(), out.data(), sum.data(), rows, cols,
                              AddRmsNormAttrs{eps}, SerialFor);
    long double total = 0.0L;
    for (size_t i = 0; i < out.size(); ++i) total += static_cast<long double>(g[i]) * out[i] + gr[i] * sum[i];
    return total;
  };
  std::vector<double> sum(x.size()), out(x.size());
  AddRmsNormForward<double>(x.data(), r.data(), w.data(), b.data(), out.data(), sum.data(), rows, cols,
                            AddRmsNormAttrs{eps}, SerialFor);
  std::vector<double> gs(x.size()), gw(cols), gb(cols);
  AddRmsNormBackward<double>(g.data(), gr.data(), sum.data(), w.data(), gs.data(), gw.data(), gb.data(), rows,
                             cols, AddRmsNormAttrs{eps}, SerialFor);
  ExpectGradient(gs, x, loss, h, 1e-6, "grad_sum");
  ExpectGradient(gw, w, loss, h, 1e-6, "grad_weight");
  ExpectGradient(gb, b, loss, h, 1e-6, "grad_bias");
}

TEST(AddRmsNormKernel, BitwiseDeterministicAcrossParallelFor) {
  const int64_t rows = 300, cols = 257;
  const auto s = Random<float>(rows * cols, 10), w = Random<float>(cols, 11),
             g = Random<float>(rows * cols, 12);
  std::vector<float> gs0(s.size()), gw0(cols), gb0(cols), gs1(s.size()), gw1(cols), gb1(cols);
  AddRmsNormBackward<float>(g.data(), nullptr, s.data(), w.data(), gs0.data(), gw0.data(), gb0.data(), rows,
                            cols, AddRmsNormAttrs{1e-6}, SerialFor);
  AddRmsNormBackward<float>(g.data(), nullptr, s.data(), w.data(), gs1.data(), gw1.data(), gb1.data(), rows,
                            cols, AddRmsNormAttrs{1e-6}, testing::ReverseChunkedFor(1));
  EXPECT_EQ(std::memcmp(gs0.data(), gs1.data(), gs0.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gw0.data(), gw1.data(), gw0.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gb0.data(), gb1.data(), gb0.size() * sizeof(float)), 0);
}

TEST(AddRmsNormInfer, TwoOutputsOfXShape) {
  std::vector<TensorInfo> outputs;
  const Status status = InferAddRmsNorm(
      {Info("float32", {2, -1, 8}), Info("float32", {2, 3, 8}), Info("float32", {8}), Absent()}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[1].shape, (Shape{2, -1, 8}));
}

TEST(AddRmsNormInfer, RejectsResidualOfOtherShape) {
  std::vector<TensorInfo> outputs;
  const Status status = InferAddRmsNorm(
      {Info("float32", {2, 8}), Info("float32", {2, 7}), Info("float32", {8}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "add_rms_norm")) << status.message();
  EXPECT_TRUE(
      Contains(status.message(), "argument 'residual' must have the shape of x [2, 8], got shape [2, 7]"))
      << status.message();
}

}  // namespace
}  // namespace opbridge
