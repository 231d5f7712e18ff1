#include "ops/layer_norm/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/half.h"
#include "ops/layer_norm/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

struct Dims {
  int64_t rows;
  int64_t cols;
};

// Row lengths that leave a partial vector at every vector width, one longer
// than the float32 accumulation block, and many short rows.
const std::vector<Dims>& Shapes() {
  static const std::vector<Dims> shapes = {{1, 1}, {3, 7}, {5, 37}, {2, 4099}, {1000, 3}};
  return shapes;
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const T& e : v) out.push_back(static_cast<double>(ToFloat(e)));
  return out;
}

template <typename T>
std::vector<T> FromDoubles(const std::vector<double>& v) {
  std::vector<T> out;
  out.reserve(v.size());
  for (double e : v) out.push_back(FromDouble<T>(e));
  return out;
}

// y in long double from x (as given); weight and bias may be empty (absent).
std::vector<double> ReferenceForward(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& b, int64_t rows, int64_t cols, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    long double mean = 0.0L, var = 0.0L;
    for (int64_t j = 0; j < cols; ++j) mean += xr[j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= cols;
    const long double rstd = 1.0L / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      long double v = (xr[j] - mean) * rstd;
      if (!w.empty()) v *= w[static_cast<size_t>(j)];
      if (!b.empty()) v += b[static_cast<size_t>(j)];
      y[static_cast<size_t>(r * cols + j)] = static_cast<double>(v);
    }
  }
  return y;
}

struct Grads {
  std::vector<double> x, weight, bias;
};

// Analytic gradients in long double: xhat = (x - mean) * rstd, gw = g * w;
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)); dw = sum g * xhat;
// db = sum g.
Grads ReferenceBackward(const std::vector<double>& g, const std::vector<double>& x,
                        const std::vector<double>& w, int64_t rows, int64_t cols, double eps) {
  Grads grads;
  grads.x.resize(x.size());
  std::vector<long double> dw(static_cast<size_t>(cols), 0.0L), db(static_cast<size_t>(cols), 0.0L);
  std::vector<long double> xhat(static_cast<size_t>(cols)), gw(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* gr = g.data() + r * cols;
    long double mean = 0.0L, var = 0.0L;
    for (int64_t j = 0; j < cols; ++j) mean += xr[j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= cols;
    const long double rstd = 1.0L / std::sqrt(var + eps);
    long double mean_gw = 0.0L, mean_gwx = 0.0L;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(j);
      xhat[k] = (xr[j] - mean) * rstd;
      gw[k] = gr[j] * (w.empty() ? 1.0L : static_cast<long double>(w[k]));
      mean_gw += gw[k];
      mean_gwx += gw[k] * xhat[k];
      dw[k] += gr[j] * xhat[k];
      db[k] += gr[j];
    }
    mean_gw /= cols;
    mean_gwx /= cols;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(j);
      grads.x[static_cast<size_t>(r * cols + j)] =
          static_cast<double>(rstd * (gw[k] - mean_gw - xhat[k] * mean_gwx));
    }
  }
  grads.weight.assign(dw.begin(), dw.end());
  grads.bias.assign(db.begin(), db.end());
  return grads;
}

template <typename T>
double Tol();
template <>
double Tol<float>() {
  return 2e-5;
}
template <>
double Tol<double>() {
  return 1e-12;
}
template <>
double Tol<Float16>() {
  return 4e-3;
}
template <>
double Tol<BFloat16>() {
  return 3e-2;
}

// Every combination of weight and bias present or absent.
template <typename T>
void CheckForward() {
  uint32_t seed = 1;
  for (const Dims& dims : Shapes()) {
    for (int affine = 0; affine < 4; ++affine) {
      const int64_t rows = dims.rows, cols = dims.cols;
      const auto x = FromDoubles<T>(Random<double>(rows * cols, seed++, -2.0, 2.0));
      const auto w = FromDoubles<T>(Random<double>(cols, seed++, 0.5, 1.5));
      const auto b = FromDoubles<T>(Random<double>(cols, seed++, -1.0, 1.0));
      const bool has_w = affine & 1, has_b = affine & 2;
      std::vector<T> y(x.size());
      LayerNormForward<T>(x.data(), has_w ? w.data() : nullptr, has_b ? b.data() : nullptr, y.data(), rows,
                          cols, LayerNormAttrs{1e-5}, SerialFor);
      const auto want = ReferenceForward(ToDouble(x), has_w ? ToDouble(w) : std::vector<double>{},
                                         has_b ? ToDouble(b) : std::vector<double>{}, rows, cols, 1e-5);
      testing::ExpectNear(
          ToDouble(y), want, Tol<T>(),
          "y " + std::to_string(rows) + "x" + std::to_string(cols) + " affine " + std::to_string(affine));
    }
  }
}

TEST(LayerNormKernel, ForwardFloat) { CheckForward<float>(); }
TEST(LayerNormKernel, ForwardDouble) { CheckForward<double>(); }
TEST(LayerNormKernel, ForwardFloat16) { CheckForward<Float16>(); }
TEST(LayerNormKernel, ForwardBFloat16) { CheckForward<BFloat16>(); }

TEST(LayerNormKernel, MeanFarFromZeroKeepsPrecision) {
  // Rows whose mean is 1e4 times their spread: E[x^2] - E[x]^2 in float
  // would lose every digit.
  const int64_t rows = 4, cols = 1000;
  std::vector<float> x = Random<float>(rows * cols, 40, -1.0, 1.0);
  for (float& v : x) v += 1e4f;
  std::vector<float> y(x.size());
  LayerNormForward<float>(x.data(), nullptr, nullptr, y.data(), rows, cols, LayerNormAttrs{1e-5}, SerialFor);
  testing::ExpectNear(y, ReferenceForward(ToDouble(x), {}, {}, rows, cols, 1e-5), 1e-4, "y, mean 1e4");
}

TEST(LayerNormKernel, ConstantRowGivesBias) {
  // Zero variance: (x - mean) is exactly 0, so y is the bias.
  const int64_t rows = 2, cols = 33;
  const std::vector<double> x(static_cast<size_t>(rows * cols), 3.25);
  const std::vector<double> w = Random<double>(cols, 41), b = Random<double>(cols, 42);
  std::vector<double> y(x.size());
  LayerNormForward<double>(x.data(), w.data(), b.data(), y.data(), rows, cols, LayerNormAttrs{1e-5},
                           SerialFor);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j)
      EXPECT_EQ(y[static_cast<size_t>(r * cols + j)], b[static_cast<size_t>(j)]);
  }
}

template <typename T>
void CheckBackward() {
  uint32_t seed = 100;
  for (const Dims& dims : Shapes()) {
    for (bool has_w : {true, false}) {
      const int64_t rows = dims.rows, cols = dims.cols;
      const auto x = FromDoubles<T>(Random<double>(rows * cols, seed++, -2.0, 2.0));
      const auto w = FromDoubles<T>(Random<double>(cols, seed++, 0.5, 1.5));
      const auto g = FromDoubles<T>(Random<double>(rows * cols, seed++, -1.0, 1.0));
      std::vector<T> gx(x.size()), gw(static_cast<size_t>(cols)), gb(static_cast<size_t>(cols));
      LayerNormBackward<T>(g.data(), nullptr, x.data(), has_w ? w.data() : nullptr, gx.data(),
                           has_w ? gw.data() : nullptr, gb.data(), rows, cols, LayerNormAttrs{1e-5},
                           SerialFor);
      const Grads want = ReferenceBackward(ToDouble(g), ToDouble(x),
                                           has_w ? ToDouble(w) : std::vector<double>{}, rows, cols, 1e-5);
      const std::string where =
          std::to_string(rows) + "x" + std::to_string(cols) + (has_w ? "" : " no weight");
      testing::ExpectNear(ToDouble(gx), want.x, 4 * Tol<T>(), "grad_x " + where);
      // Parameter gradients sum over rows: their rounding grows with the row count.
      const double rows_tol = 4 * Tol<T>() * std::sqrt(static_cast<double>(rows));
      if (has_w) testing::ExpectNear(ToDouble(gw), want.weight, rows_tol, "grad_weight " + where);
      testing::ExpectNear(ToDouble(gb), want.bias, rows_tol, "grad_bias " + where);
    }
  }
}

TEST(LayerNormKernel, BackwardFloat) { CheckBackward<float>(); }
TEST(LayerNormKernel, BackwardDouble) { CheckBackward<double>(); }
TEST(LayerNormKernel, BackwardFloat16) { CheckBackward<Float16>(); }
TEST(LayerNormKernel, BackwardBFloat16) { CheckBackward<BFloat16>(); }

TEST(LayerNormKernel, BackwardMatchesFiniteDifferences) {
  // L = sum(g * y) + sum(ga * x) through grad_add: central differences of
  // the kernel's own forward check the gradients independently of the
  // analytic formula.
  const int64_t rows = 3, cols = 5;
  const double eps = 1e-3, h = 1e-6;
  std::vector<double> x = Random<double>(rows * cols, 11), w = Random<double>(cols, 12, 0.5, 1.5),
                      b = Random<double>(cols, 13);
  const std::vector<double> g = Random<double>(rows * cols, 14), ga = Random<double>(rows * cols, 15);
  auto loss = [&]() {
    std::vector<double> y(x.size());
    LayerNormForward<double>(x.data(), w.data(), b.data(), y.data(), rows, cols, LayerNormAttrs{eps},
                             SerialFor);
    long double total = 0.0L;
    for (size_t i = 0; i < y.size(); ++i) total += static_cast<long double>(g[i]) * y[i] + ga[i] * x[i];
    return total;
  };
  std::vector<double> gx(x.size()), gw(w.size()), gb(b.size());
  LayerNormBackward<double>(g.data(), ga.data(), x.data(), w.data(), gx.data(), gw.data(), gb.data(), rows,
                            cols, LayerNormAttrs{eps}, SerialFor);
  ExpectGradient(gx, x, loss, h, 1e-7, "grad_x");
  ExpectGradient(gw, w, loss, h, 1e-7, "grad_weight");
  ExpectGradient(gb, b, loss, h, 1e-7, "grad_bias");
}

TEST(LayerNormKernel, UnneededParameterGradientsAreSkipped) {
  const int64_t rows = 37, cols = 9;
  const auto x = Random<float>(rows * cols, 21), w = Random<float>(cols, 22, 0.5, 1.5),
             g = Random<float>(rows * cols, 23);
  std::vector<float> gx(x.size()), gw(static_cast<size_t>(cols)), gb(static_cast<size_t>(cols));
  LayerNormBackward<float>(g.data(), nullptr, x.data(), w.data(), gx.data(), gw.data(), gb.data(), rows, cols,
                           LayerNormAttrs{1e-5}, SerialFor);
  std::vector<float> gx2(x.size()), gb2(static_cast<size_t>(cols));
  LayerNormBackward<float>(g.data(), nullptr, x.data(), w.data(), gx2.data(), nullptr, gb2.data(), rows, cols,
                           LayerNormAttrs{1e-5}, SerialFor);
  EXPECT_EQ(gx, gx2);
  EXPECT_EQ(gb, gb2);
  std::vector<float> gx3(x.size());
  LayerNormBackward<float>(g.data(), nullptr, x.data(), w.data(), gx3.data(), nullptr, nullptr, rows, cols,
                           LayerNormAttrs{1e-5}, SerialFor);
  EXPECT_EQ(gx, gx3);
}

TEST(LayerNormKernel, ZeroRows) {
  std::vector<float> gw(4, 7.0f), gb(4, 7.0f);
  LayerNormBackward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, gw.data(), gb.data(), 0, 4,
                           LayerNormAttrs{1e-5}, SerialFor);
  EXPECT_EQ(gw, std::vector<float>(4, 0.0f));
  EXPECT_EQ(gb, std::vector<float>(4, 0.0f));
  std::vector<float> y(4, 5.0f);
  LayerNormForward<float>(nullptr, nullptr, nullptr, y.data(), 0, 4, LayerNormAttrs{1e-5}, SerialFor);
  EXPECT_EQ(y, std::vector<float>(4, 5.0f));
}

template <typename T>
void CheckDeterministic() {
  for (const Dims& dims : std::vector<Dims>{{3, 7}, {2, 65536}, {1000, 3}, {200, 4096}, {130, 256}}) {
    const int64_t rows = dims.rows, cols = dims.cols;
    const auto x = Random<T>(rows * cols, 30), w = Random<T>(cols, 31), b = Random<T>(cols, 32),
               g = Random<T>(rows * cols, 33);
    const size_t n = x.size(), c = static_cast<size_t>(cols);
    std::vector<T> y0(n), gx0(n), gw0(c), gb0(c), y1(n), gx1(n), gw1(c), gb1(c);
    LayerNormForward<T>(x.data(), w.data(), b.data(), y0.data(), rows, cols, LayerNormAttrs{1e-5}, SerialFor);
    LayerNormBackward<T>(g.data(), nullptr, x.data(), w.data(), gx0.data(), gw0.data(), gb0.data(), rows,
                         cols, LayerNormAttrs{1e-5}, SerialFor);
    const ParallelFor reverse = testing::ReverseChunkedFor(1);
    LayerNormForward<T>(x.data(), w.data(), b.data(), y1.data(), rows, cols, LayerNormAttrs{1e-5}, reverse);
    LayerNormBackward<T>(g.data(), nullptr, x.data(), w.data(), gx1.data(), gw1.data(), gb1.data(), rows,
                         cols, LayerNormAttrs{1e-5}, reverse);
    const std::string where = std::to_string(rows) + "x" + std::to_string(cols);
    EXPECT_EQ(std::memcmp(y0.data(), y1.data(), n * sizeof(T)), 0) << "y " << where;
    EXPECT_EQ(std::memcmp(gx0.data(), gx1.data(), n * sizeof(T)), 0) << "grad_x " << where;
    EXPECT_EQ(std::memcmp(gw0.data(), gw1.data(), c * sizeof(T)), 0) << "grad_weight " << where;
    EXPECT_EQ(std::memcmp(gb0.data(), gb1.data(), c * sizeof(T)), 0) << "grad_bias " << where;
  }
}

TEST(LayerNormKernel, BitwiseDeterministicAcrossParallelForFloat) { CheckDeterministic<float>(); }
TEST(LayerNormKernel, BitwiseDeterministicAcrossParallelForDouble) { CheckDeterministic<double>(); }

TEST(LayerNormLaunch, RunsThroughKernelArgsWithoutWeight) {
  const int64_t rows = 6, cols = 4;  // x is [2, 3, 4]
  const auto x = Random<float>(rows * cols, 51), b = Random<float>(cols, 52);
  std::vector<float> y(x.size(), -777.0f);
  KernelArgs args;
  args.inputs = {x.data(), nullptr, b.data()};
  args.input_infos = {Info("float32", {2, 3, 4}), Absent(), Info("float32", {4})};
  args.outputs = {y.data()};
  args.output_infos = {Info("float32", {2, 3, 4})};
  args.attrs = {1e-5};
  args.parallel_for = SerialFor;
  const Status status = LaunchLayerNorm(args);
  ASSERT_TRUE(status.ok()) << status.message();
  testing::ExpectNear(y, ReferenceForward(ToDouble(x), {}, ToDouble(b), rows, cols, 1e-5), 1e-5, "y");
}

// ---- Shape and dtype rule ----

TEST(LayerNormInfer, WeightAndBiasAreOptional) {
  std::vector<TensorInfo> outputs;
  const Status status = InferLayerNorm({Info("bfloat16", {2, -1, 8}), Absent(), Absent()}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].shape, (Shape{2, -1, 8}));
  EXPECT_EQ(outputs[0].dtype, "bfloat16");
}

TEST(LayerNormInfer, RejectsZeroDimX) {
  std::vector<TensorInfo> outputs;
  const Status status = InferLayerNorm({Info("float32", {}), Absent(), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "layer_norm")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "argument 'x' must have at least 1 dimension")) << status.message();
}

TEST(LayerNormInfer, RejectsWeightOrBiasOfWrongLength) {
  std::vector<TensorInfo> outputs;
  Status status = InferLayerNorm({Info("float32", {2, 8}), Info("float32", {7}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(
      Contains(status.message(),
               "argument 'weight' must be 1-D with 8 elements (the last dimension of x), got shape [7]"))
      << status.message();
  status = InferLayerNorm({Info("float32", {2, 8}), Absent(), Info("float32", {1, 8})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'bias'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "got shape [1, 8]")) << status.message();
}

TEST(LayerNormInfer, RejectsDtypes) {
  std::vector<TensorInfo> outputs;
  Status status = InferLayerNorm({Info("int32", {2, 8}), Absent(), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(
      Contains(status.message(), "argument 'x' must be float32, float64, float16 or bfloat16, got int32"))
      << status.message();
  status = InferLayerNorm({Info("float32", {2, 8}), Absent(), Info("float64", {8})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'bias' must have the dtype of x (float32), got float64"))
      << status.message();
}

TEST(LayerNormInfer, BackwardGivesParameterGradientsOfLastDim) {
  std::vector<TensorInfo> outputs;
  const Status status = InferLayerNormBackward(
      {Info("float32", {2, -1, 8}), Info("float32", {2, -1, 8}), Absent()}, {AttrValue(1e-5)}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0].shape, (Shape{2, -1, 8}));
  EXPECT_EQ(outputs[1].shape, (Shape{8}));
  EXPECT_EQ(outputs[2].shape, (Shape{8}));
}

}  // namespace
}  // namespace opbridge
