#include "ops/add_layer_norm/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "opbridge/half.h"
#include "ops/add_layer_norm/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

template <typename T>
double AsDouble(T v) {
  return static_cast<double>(ToFloat(v));
}

// out and residual_out in long double from x and residual as T; the sum is
// rounded to T first, as the unfused x + residual would be.
template <typename T>
void Reference(const std::vector<T>& x, const std::vector<T>& r, const std::vector<T>& w,
               const std::vector<T>& b, int64_t rows, int64_t cols, double eps, std::vector<double>* out,
               std::vector<double>* sum) {
  out->resize(x.size());
  sum->resize(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    long double mean = 0.0L, var = 0.0L;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      const T s = FromFloat<T>(static_cast<float>(ToFloat(x[k]) + ToFloat(r[k])));
      (*sum)[k] = std::is_same_v<T, double> ? AsDouble(x[k]) + AsDouble(r[k]) : AsDouble(s);
      mean += (*sum)[k];
    }
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) {
      const long double c = (*sum)[static_cast<size_t>(i * cols + j)] - mean;
      var += c * c;
    }
    var /= cols;
    const long double rstd = 1.0L / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      long double v = ((*sum)[k] - mean) * rstd;
      if (!w.empty()) v *= AsDouble(w[static_cast<size_t>(j)]);
      if (!b.empty()) v += AsDouble(b[static_cast<size_t>(j)]);
      (*out)[k] = static_cast<double>(v);
    }
  }
}

template <typename T>
void CheckForward(double tol) {
  uint32_t seed = 1;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 4099}, {500, 3}}) {
    for (bool affine : {true, false}) {
      const auto x = RandomOf<T>(rows * cols, seed++), r = RandomOf<T>(rows * cols, seed++);
      const auto w = affine ? RandomOf<T>(cols, seed++, 0.5, 1.5) : std::vector<T>{};
      const auto b = affine ? RandomOf<T>(cols, seed++) : std::vector<T>{};
      std::vector<T> out(x.size()), sum(x.size());
      AddLayerNormForward<T>(x.data(), r.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr,
                             out.data(), sum.data(), rows, cols, AddLayerNormAttrs{1e-5}, SerialFor);
      std::vector<double> want_out, want_sum;
      Reference(x, r, w, b, rows, cols, 1e-5, &want_out, &want_sum);
      std::vector<double> got_out, got_sum;
      for (size_t k = 0; k < x.size(); ++k) {
        got_out.push_back(AsDouble(out[k]));
        got_sum.push_back(AsDouble(sum[k]));
      }
      const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + (affine ? "" : " plain");
      testing::ExpectNear(got_out, want_out, tol, "out " + where);
      testing::ExpectNear(got_sum, want_sum, 0.0, "residual_out " + where);
    }
  }
}

TEST(AddLayerNormKernel, ForwardFloat) { CheckForward<float>(2e-5); }
TEST(AddLayerNormKernel, ForwardDouble) { CheckForward<double>(1e-12); }
TEST(AddLayerNormKernel, ForwardFloat16) { CheckForward<Float16>(4e-3); }
TEST(AddLayerNormKernel, ForwardBFloat16) { CheckForward<BFloat16>(3e-2); }

TEST(AddLayerNormKernel, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 5;
  const double eps = 1e-5, h = 1e-6;
  auto x = Random<double>(rows * cols, 4), r = Random<double>(rows * cols, 5);
  auto w = Random<double>(cols, 6, 0.5, 1.5), b = Random<double>(cols, 7);
  const auto g = Random<double>(rows * cols, 8), gr = Random<double>(rows * cols, 9);
  // Loss L = sum(g * out) + sum(gr * residual_out).
  auto loss = [&]() {
    std::vector<double> out(x.size()), sum(x.size());
    AddLayerNormForward<double>(x.data(), r.data(), w.data(), b.data(), out.data(), sum.data(), rows, cols,
                                AddLayerNormAttrs{eps}, SerialFor);
    long double total = 0.0L;
    for (size_t i = 0; i < out.size(); ++i) total += static_cast<long double>(g[i]) * out[i] + gr[i] * sum[i];
    return total;
  };
  std::vector<double> sum(x.size()), out(x.size());
  AddLayerNormForward<double>(x.data(), r.data(), w.data(), b.data(), out.data(), sum.data(), rows, cols,
                              AddLayerNormAttrs{eps}, SerialFor);
  std::vector<double> gs(x.size()), gw(cols), gb(cols);
  AddLayerNormBackward<double>(g.data(), gr.data(), sum.data(), w.data(), gs.data(), gw.data(), gb.data(),
                               rows, cols, AddLayerNormAttrs{eps}, SerialFor);
  ExpectGradient(gs, x, loss, h, 1e-6, "grad_sum (x)");
  ExpectGradient(gs, r, loss, h, 1e-6, "grad_sum (residual)");
  ExpectGradient(gw, w, loss, h, 1e-6, "grad_weight");
  ExpectGradient(gb, b, loss, h, 1e-6, "grad_bias");
}

TEST(AddLayerNormKernel, BitwiseDeterministicAcrossParallelFor) {
  const int64_t rows = 300, cols = 257;
  const auto x = Random<float>(rows * cols, 10), r = Random<float>(rows * cols, 11),
             w = Random<float>(cols, 12), g = Random<float>(rows * cols, 13);
  const size_t n = x.size(), c = static_cast<size_t>(cols);
  std::vector<float> out0(n), sum0(n), gs0(n), gw0(c), gb0(c), out1(n), sum1(n), gs1(n), gw1(c), gb1(c);
  AddLayerNormForward<float>(x.data(), r.data(), w.data(), nullptr, out0.data(), sum0.data(), rows, cols,
                             AddLayerNormAttrs{1e-5}, SerialFor);
  AddLayerNormBackward<float>(g.data(), nullptr, sum0.data(), w.data(), gs0.data(), gw0.data(), gb0.data(),
                              rows, cols, AddLayerNormAttrs{1e-5}, SerialFor);
  const ParallelFor reverse = testing::ReverseChunkedFor(1);
  AddLayerNormForward<float>(x.data(), r.data(), w.data(), nullptr, out1.data(), sum1.data(), rows, cols,
                             AddLayerNormAttrs{1e-5}, reverse);
  AddLayerNormBackward<float>(g.data(), nullptr, sum1.data(), w.data(), gs1.data(), gw1.data(), gb1.data(),
                              rows, cols, AddLayerNormAttrs{1e-5}, reverse);
  EXPECT_EQ(std::memcmp(out0.data(), out1.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(sum0.data(), sum1.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gs0.data(), gs1.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gw0.data(), gw1.data(), c * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gb0.data(), gb1.data(), c * sizeof(float)), 0);
}

TEST(AddLayerNormInfer, TwoOutputsOfXShape) {
  std::vector<TensorInfo> outputs;
  const Status status = InferAddLayerNorm(
      {Info("float16", {2, -1, 8}), Info("float16", {2, 3, 8}), Absent(), Absent()}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].shape, (Shape{2, -1, 8}));
  EXPECT_EQ(outputs[1].shape, (Shape{2, -1, 8}));
  EXPECT_EQ(outputs[1].dtype, "float16");
}

TEST(AddLayerNormInfer, RejectsResidualOfOtherShape) {
  std::vector<TensorInfo> outputs;
  const Status status = InferAddLayerNorm(
      {Info("float32", {2, 8}), Info("float32", {2, 7}), Info("float32", {8}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "add_layer_norm")) << status.message();
  EXPECT_TRUE(
      Contains(status.message(), "argument 'residual' must have the shape of x [2, 8], got shape [2, 7]"))
      << status.message();
}

TEST(AddLayerNormInfer, RejectsBiasOfWrongLengthAndResidualOfOtherDtype) {
  std::vector<TensorInfo> outputs;
  Status status = InferAddLayerNorm(
      {Info("float32", {2, 8}), Info("float32", {2, 8}), Absent(), Info("float32", {9})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'bias' must be 1-D with 8 elements")) << status.message();
  status =
      InferAddLayerNorm({Info("float32", {2, 8}), Info("float16", {2, 8}), Absent(), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(
      Contains(status.message(), "argument 'residual' must have the dtype of x (float32), got float16"))
      << status.message();
}

}  // namespace
}  // namespace opbridge
