#include "ops/rms_norm/kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"
#include "ops/rms_norm/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

struct Dims {
  int64_t rows;
  int64_t cols;
};

const std::vector<Dims>& ReferenceShapes() {
  static const std::vector<Dims> shapes = {{1, 1}, {3, 7}, {2, 65536}, {1000, 3}};
  return shapes;
}

// Calls body on chunks of `chunk` elements (or `grain` when chunk is 0),
// last chunk first: a parallel runtime may run them in any order.
ParallelFor ReverseChunkedFor(int64_t chunk, int* calls) {
  return [chunk, calls](int64_t n, int64_t grain, const RangeBody& body) {
    if (n <= 0) return;
    const int64_t step = std::max<int64_t>(1, chunk > 0 ? chunk : grain);
    for (int64_t begin = ((n - 1) / step) * step; begin >= 0; begin -= step) {
      body(begin, std::min(n, begin + step));
      if (calls != nullptr) ++*calls;
    }
  };
}

// A reference value with the magnitude its rounding error scales with.
struct Ref {
  long double value;
  long double scale;
};

long double InverseRmsRef(const long double* x, int64_t cols, long double eps) {
  long double sum = 0.0L;
  for (int64_t j = 0; j < cols; ++j) sum += x[j] * x[j];
  return 1.0L / std::sqrt(sum / static_cast<long double>(cols) + eps);
}

template <typename T>
std::vector<long double> Widen(const std::vector<T>& v) {
  return std::vector<long double>(v.begin(), v.end());
}

template <typename T>
std::vector<Ref> ReferenceForward(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>* b,
                                  int64_t rows, int64_t cols, double eps) {
  const std::vector<long double> xl = Widen(x), wl = Widen(w);
  std::vector<Ref> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const long double* xr = xl.data() + r * cols;
    const long double rstd = InverseRmsRef(xr, cols, eps);
    for (int64_t j = 0; j < cols; ++j) {
      const long double normed = xr[j] * rstd * wl[static_cast<size_t>(j)];
      const long double bias = b != nullptr ? static_cast<long double>((*b)[static_cast<size_t>(j)]) : 0.0L;
      y[static_cast<size_t>(r * cols + j)] = Ref{normed + bias, std::fabs(normed) + std::fabs(bias)};
    }
  }
  return y;
}

struct BackwardRef {
  std::vector<Ref> grad_x, grad_weight, grad_bias;
};

// Analytic gradients: r = 1/sqrt(mean(x^2)+eps);
// dx_j = r*g_j*w_j - r^3/D * x_j * sum_k g_k w_k x_k; dw_j = sum_rows g_j x_j r;
// db_j = sum_rows g_j.
template <typename T>
BackwardRef ReferenceBackward(const std::vector<T>& g, const std::vector<T>& x, const std::vector<T>& w,
                              int64_t rows, int64_t cols, double eps) {
  const std::vector<long double> gl = Widen(g), xl = Widen(x), wl = Widen(w);
  BackwardRef ref;
  ref.grad_x.resize(x.size());
  ref.grad_weight.assign(static_cast<size_t>(cols), Ref{0.0L, 0.0L});
  ref.grad_bias.assign(static_cast<size_t>(cols), Ref{0.0L, 0.0L});
  const long double d = static_cast<long double>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const long double* xr = xl.data() + r * cols;
    const long double* gr = gl.data() + r * cols;
    const long double rstd = InverseRmsRef(xr, cols, eps);
    long double dot = 0.0L, dot_abs = 0.0L;
    for (int64_t j = 0; j < cols; ++j) {
      const long double t = gr[j] * wl[static_cast<size_t>(j)] * xr[j];
      dot += t;
      dot_abs += std::fabs(t);
    }
    const long double coef = rstd * rstd * rstd / d;
    for (int64_t j = 0; j < cols; ++j) {
      const long double first = rstd * gr[j] * wl[static_cast<size_t>(j)];
      ref.grad_x[static_cast<size_t>(r * cols + j)] =
          Ref{first - coef * xr[j] * dot, std::fabs(first) + coef * std::fabs(xr[j]) * dot_abs};
      Ref& dw = ref.grad_weight[static_cast<size_t>(j)];
      dw.value += gr[j] * xr[j] * rstd;
      dw.scale += std::fabs(gr[j] * xr[j] * rstd);
      Ref& db = ref.grad_bias[static_cast<size_t>(j)];
      db.value += gr[j];
      db.scale += std::fabs(gr[j]);
    }
  }
  return ref;
}

// Checks got[i] against ref[i] to rel_tol of the reference's scale; reports
// only the first few failures.
template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<Ref>& ref, double rel_tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const long double tol = rel_tol * std::max<long double>(ref[i].scale, 1e-30L);
    const long double err = std::fabs(static_cast<long double>(got[i]) - ref[i].value);
    const bool ok = std::isfinite(static_cast<double>(got[i])) && err <= tol;
    if (!ok && ++failures <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << static_cast<double>(got[i]) << ", expected "
                    << static_cast<double>(ref[i].value) << " (|err| " << static_cast<double>(err)
                    << " > tol " << static_cast<double>(tol) << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

template <typename T>
void CheckForwardShapes(bool with_bias) {
  ParallelFor serial = SerialFor;
  const double eps = 1e-6;
  uint32_t seed = with_bias ? 100 : 200;
  for (const Dims& dims : ReferenceShapes()) {
    const int64_t rows = dims.rows, cols = dims.cols;
    const std::vector<T> x = testing::Random<T>(rows * cols, seed++, -2.0, 2.0);
    const std::vector<T> w = testing::Random<T>(cols, seed++, 0.5, 1.5);
    const std::vector<T> b = testing::Random<T>(cols, seed++, -1.0, 1.0);
    std::vector<T> y(x.size(), T(-777));
    RmsNormForward<T>(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), rows, cols,
                      RmsNormAttrs{eps}, serial);
    const std::vector<Ref> ref = ReferenceForward(x, w, with_bias ? &b : nullptr, rows, cols, eps);
    ExpectClose(y, ref, testing::RelTol<T>(),
                std::string(testing::TypeName<T>()) + " y " + std::to_string(rows) + "x" +
                    std::to_string(cols) + (with_bias ? " with bias" : " without bias"));
  }
}

TEST(RmsNormKernel, ForwardFloatWithoutBias) { CheckForwardShapes<float>(false); }
TEST(RmsNormKernel, ForwardFloatWithBias) { CheckForwardShapes<float>(true); }
TEST(RmsNormKernel, ForwardDoubleWithoutBias) { CheckForwardShapes<double>(false); }
TEST(RmsNormKernel, ForwardDoubleWithBias) { CheckForwardShapes<double>(true); }

TEST(RmsNormKernel, ForwardOneByOneIsSignTimesWeight) {
  // One element: x / sqrt(x^2 + eps) * w + b, about sign(x) * w + b.
  ParallelFor serial = SerialFor;
  const double x = -3.0, w = 2.5, b = 0.25, eps = 1e-6;
  double y = 0.0;
  RmsNormForward<double>(&x, &w, &b, &y, 1, 1, RmsNormAttrs{eps}, serial);
  EXPECT_NEAR(y, x / std::sqrt(x * x + eps) * w + b, 1e-12);
  EXPECT_NEAR(y, -2.25, 1e-6);
}

template <typename T>
void CheckZeroRowGivesZeros() {
  ParallelFor serial = SerialFor;
  const int64_t rows = 3, cols = 5;
  std::vector<T> x = testing::Random<T>(rows * cols, 7, -1.0, 1.0);
  std::fill(x.begin() + cols, x.begin() + 2 * cols, T(0));  // Row 1 is all zeros.
  const std::vector<T> w = testing::Random<T>(cols, 8, 0.5, 1.5);
  const std::vector<T> b = testing::Random<T>(cols, 9, -1.0, 1.0);
  std::vector<T> y(x.size(), T(-777));
  RmsNormForward<T>(x.data(), w.data(), nullptr, y.data(), rows, cols, RmsNormAttrs{1e-6}, serial);
  for (int64_t j = 0; j < cols; ++j) {
    const T v = y[static_cast<size_t>(cols + j)];
    EXPECT_FALSE(std::isnan(v)) << "column " << j;
    EXPECT_EQ(v, T(0)) << "column " << j;
  }
  ExpectClose(y, ReferenceForward<T>(x, w, nullptr, rows, cols, 1e-6), testing::RelTol<T>(), "y, zero row");

  std::vector<T> yb(x.size(), T(-777));
  RmsNormForward<T>(x.data(), w.data(), b.data(), yb.data(), rows, cols, RmsNormAttrs{1e-6}, serial);
  for (int64_t j = 0; j < cols; ++j) {
    EXPECT_EQ(yb[static_cast<size_t>(cols + j)], b[static_cast<size_t>(j)]) << "column " << j;
  }

  // The backward of a zero row is finite too: grad_x = g * w / sqrt(eps).
  const std::vector<T> g = testing::Random<T>(rows * cols, 10, -1.0, 1.0);
  std::vector<T> grad_x(x.size()), grad_w(static_cast<size_t>(cols)), grad_b(static_cast<size_t>(cols));
  RmsNormBackward<T>(g.data(), x.data(), w.data(), grad_x.data(), grad_w.data(), grad_b.data(), rows, cols,
                     RmsNormAttrs{1e-6}, serial);
  for (T v : grad_x) EXPECT_TRUE(std::isfinite(v));
  const BackwardRef ref = ReferenceBackward(g, x, w, rows, cols, 1e-6);
  ExpectClose(grad_x, ref.grad_x, testing::RelTol<T>(), "grad_x, zero row");
  ExpectClose(grad_w, ref.grad_weight, testing::RelTol<T>(), "grad_weight, zero row");
  ExpectClose(grad_b, ref.grad_bias, testing::RelTol<T>(), "grad_bias, zero row");
}

TEST(RmsNormKernel, ZeroRowGivesZerosNotNanFloat) { CheckZeroRowGivesZeros<float>(); }
TEST(RmsNormKernel, ZeroRowGivesZerosNotNanDouble) { CheckZeroRowGivesZeros<double>(); }

TEST(RmsNormKernel, EpsIsAppliedInsideTheRoot) {
  // Tiny inputs with a large eps: the result depends on eps, and matches
  // the reference only if eps is added to mean(x^2) inside the root.
  ParallelFor serial = SerialFor;
  const int64_t rows = 2, cols = 4;
  const std::vector<double> x = {1e-3, -2e-3, 3e-3, 4e-4, 5e-3, 5e-3, -5e-3, 1e-4};
  const std::vector<double> w = {1.0, 2.0, 0.5, 1.5};
  const double eps = 1e-4;
  std::vector<double> y(x.size());
  RmsNormForward<double>(x.data(), w.data(), nullptr, y.data(), rows, cols, RmsNormAttrs{eps}, serial);
  ExpectClose(y, ReferenceForward<double>(x, w, nullptr, rows, cols, eps), 1e-12, "y, eps 1e-4");
  const std::vector<Ref> without_eps = ReferenceForward<double>(x, w, nullptr, rows, cols, 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_GT(std::fabs(y[i] - static_cast<double>(without_eps[i].value)), 1e-3 * std::fabs(y[i]))
        << "eps had no visible effect at " << i;
  }
}

template <typename T>
void CheckBackwardShapes() {
  ParallelFor serial = SerialFor;
  const double eps = 1e-6;
  uint32_t seed = 300;
  for (const Dims& dims : ReferenceShapes()) {
    const int64_t rows = dims.rows, cols = dims.cols;
    const std::vector<T> x = testing::Random<T>(rows * cols, seed++, -2.0, 2.0);
    const std::vector<T> w = testing::Random<T>(cols, seed++, 0.5, 1.5);
    const std::vector<T> g = testing::Random<T>(rows * cols, seed++, -1.0, 1.0);
    std::vector<T> grad_x(x.size(), T(-777)), grad_w(static_cast<size_t>(cols), T(-777)),
        grad_b(static_cast<size_t>(cols), T(-777));
    RmsNormBackward<T>(g.data(), x.data(), w.data(), grad_x.data(), grad_w.data(), grad_b.data(), rows, cols,
                       RmsNormAttrs{eps}, serial);
    const BackwardRef ref = ReferenceBackward(g, x, w, rows, cols, eps);
    const std::string where =
        std::string(testing::TypeName<T>()) + " " + std::to_string(rows) + "x" + std::to_string(cols);
    ExpectClose(grad_x, ref.grad_x, testing::RelTol<T>(), "grad_x " + where);
    ExpectClose(grad_w, ref.grad_weight, testing::RelTol<T>(), "grad_weight " + where);
    ExpectClose(grad_b, ref.grad_bias, testing::RelTol<T>(), "grad_bias " + where);
  }
}

TEST(RmsNormKernel, BackwardFloatMatchesAnalytic) { CheckBackwardShapes<float>(); }
TEST(RmsNormKernel, BackwardDoubleMatchesAnalytic) { CheckBackwardShapes<double>(); }

TEST(RmsNormKernel, BackwardMatchesFiniteDifferences) {
  // L = sum(g * y); central differences of the kernel's own forward in
  // double check the gradients independently of the analytic formula.
  ParallelFor serial = SerialFor;
  const int64_t rows = 3, cols = 5;
  const double eps = 1e-3;
  std::vector<double> x = testing::Random<double>(rows * cols, 11, -2.0, 2.0);
  std::vector<double> w = testing::Random<double>(cols, 12, 0.5, 1.5);
  std::vector<double> b = testing::Random<double>(cols, 13, -1.0, 1.0);
  const std::vector<double> g = testing::Random<double>(rows * cols, 14, -1.0, 1.0);
  auto loss = [&]() {
    std::vector<double> y(x.size());
    RmsNormForward<double>(x.data(), w.data(), b.data(), y.data(), rows, cols, RmsNormAttrs{eps}, serial);
    long double sum = 0.0L;
    for (size_t i = 0; i < y.size(); ++i) sum += static_cast<long double>(g[i]) * y[i];
    return sum;
  };
  std::vector<double> grad_x(x.size()), grad_w(w.size()), grad_b(b.size());
  RmsNormBackward<double>(g.data(), x.data(), w.data(), grad_x.data(), grad_w.data(), grad_b.data(), rows,
                          cols, RmsNormAttrs{eps}, serial);
  const double h = 1e-6;
  testing::ExpectGradient(grad_x, x, loss, h, 1e-7, "grad_x");
  testing::ExpectGradient(grad_w, w, loss, h, 1e-7, "grad_weight");
  testing::ExpectGradient(grad_b, b, loss, h, 1e-7, "grad_bias");
}

template <typename T>
void CheckNullGradBias() {
  ParallelFor serial = SerialFor;
  const int64_t rows = 37, cols = 9;
  const std::vector<T> x = testing::Random<T>(rows * cols, 21, -2.0, 2.0);
  const std::vector<T> w = testing::Random<T>(cols, 22, 0.5, 1.5);
  const std::vector<T> g = testing::Random<T>(rows * cols, 23, -1.0, 1.0);
  std::vector<T> grad_x(x.size()), grad_w(static_cast<size_t>(cols)), grad_b(static_cast<size_t>(cols));
  RmsNormBackward<T>(g.data(), x.data(), w.data(), grad_x.data(), grad_w.data(), grad_b.data(), rows, cols,
                     RmsNormAttrs{1e-6}, serial);
  std::vector<T> grad_x2(x.size()), grad_w2(static_cast<size_t>(cols));
  RmsNormBackward<T>(g.data(), x.data(), w.data(), grad_x2.data(), grad_w2.data(), nullptr, rows, cols,
                     RmsNormAttrs{1e-6}, serial);
  EXPECT_EQ(grad_x, grad_x2);
  EXPECT_EQ(grad_w, grad_w2);
  const BackwardRef ref = ReferenceBackward(g, x, w, rows, cols, 1e-6);
  ExpectClose(grad_x2, ref.grad_x, testing::RelTol<T>(), "grad_x, no grad_bias");
  ExpectClose(grad_w2, ref.grad_weight, testing::RelTol<T>(), "grad_weight, no grad_bias");
}

TEST(RmsNormKernel, NullGradBiasAllowedFloat) { CheckNullGradBias<float>(); }
TEST(RmsNormKernel, NullGradBiasAllowedDouble) { CheckNullGradBias<double>(); }

TEST(RmsNormKernel, ZeroRowsBackwardZeroesParameterGradients) {
  ParallelFor serial = SerialFor;
  const std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> grad_w(4, 7.0f), grad_b(4, 7.0f);
  RmsNormBackward<float>(nullptr, nullptr, w.data(), nullptr, grad_w.data(), grad_b.data(), 0, 4,
                         RmsNormAttrs{1e-6}, serial);
  EXPECT_EQ(grad_w, std::vector<float>(4, 0.0f));
  EXPECT_EQ(grad_b, std::vector<float>(4, 0.0f));
  // Forward with no rows writes nothing.
  std::vector<float> y(4, 5.0f);
  RmsNormForward<float>(nullptr, w.data(), nullptr, y.data(), 0, 4, RmsNormAttrs{1e-6}, serial);
  EXPECT_EQ(y, std::vector<float>(4, 5.0f));
}

template <typename T>
void CheckDeterministicAcrossParallelFor() {
  const std::vector<Dims> shapes = {{1, 1}, {3, 7}, {2, 65536}, {1000, 3}, {200, 4096}, {130, 256}};
  const double eps = 1e-6;
  uint32_t seed = 500;
  for (const Dims& dims : shapes) {
    const int64_t rows = dims.rows, cols = dims.cols;
    const std::string where =
        std::string(testing::TypeName<T>()) + " " + std::to_string(rows) + "x" + std::to_string(cols);
    const std::vector<T> x = testing::Random<T>(rows * cols, seed++, -2.0, 2.0);
    const std::vector<T> w = testing::Random<T>(cols, seed++, 0.5, 1.5);
    const std::vector<T> b = testing::Random<T>(cols, seed++, -1.0, 1.0);
    const std::vector<T> g = testing::Random<T>(rows * cols, seed++, -1.0, 1.0);
    const size_t n = x.size(), c = static_cast<size_t>(cols);

    ParallelFor serial = SerialFor;
    std::vector<T> y0(n), gx0(n), gw0(c), gb0(c);
    RmsNormForward<T>(x.data(), w.data(), b.data(), y0.data(), rows, cols, RmsNormAttrs{eps}, serial);
    RmsNormBackward<T>(g.data(), x.data(), w.data(), gx0.data(), gw0.data(), gb0.data(), rows, cols,
                       RmsNormAttrs{eps}, serial);

    // Chunks of `grain` as asked, then single-element chunks (finer than
    // asked), both last chunk first.
    for (int64_t chunk : {int64_t{0}, int64_t{1}}) {
      int calls = 0;
      const ParallelFor reverse = ReverseChunkedFor(chunk, &calls);
      std::vector<T> y1(n, T(-777)), gx1(n, T(-777)), gw1(c, T(-777)), gb1(c, T(-777));
      RmsNormForward<T>(x.data(), w.data(), b.data(), y1.data(), rows, cols, RmsNormAttrs{eps}, reverse);
      RmsNormBackward<T>(g.data(), x.data(), w.data(), gx1.data(), gw1.data(), gb1.data(), rows, cols,
                         RmsNormAttrs{eps}, reverse);
      const std::string label = where + (chunk == 0 ? " (grain chunks)" : " (unit chunks)");
      EXPECT_EQ(std::memcmp(y0.data(), y1.data(), n * sizeof(T)), 0) << "y " << label;
      EXPECT_EQ(std::memcmp(gx0.data(), gx1.data(), n * sizeof(T)), 0) << "grad_x " << label;
      EXPECT_EQ(std::memcmp(gw0.data(), gw1.data(), c * sizeof(T)), 0) << "grad_weight " << label;
      EXPECT_EQ(std::memcmp(gb0.data(), gb1.data(), c * sizeof(T)), 0) << "grad_bias " << label;
      if ((chunk == 1 && rows > 1) || rows > RowGrain(cols)) {
        EXPECT_GT(calls, 2) << "the parallel-for did not split the work: " << label;
      }
    }
  }
}

TEST(RmsNormKernel, BitwiseDeterministicAcrossParallelForFloat) {
  CheckDeterministicAcrossParallelFor<float>();
}
TEST(RmsNormKernel, BitwiseDeterministicAcrossParallelForDouble) {
  CheckDeterministicAcrossParallelFor<double>();
}

TEST(RmsNormLaunch, RunsThroughKernelArgs) {
  const int64_t rows = 6, cols = 4;  // x is [2, 3, 4]
  const std::vector<float> x = testing::Random<float>(rows * cols, 31, -2.0, 2.0);
  const std::vector<float> w = testing::Random<float>(cols, 32, 0.5, 1.5);
  std::vector<float> y(x.size(), -777.0f);
  KernelArgs args;
  args.inputs = {x.data(), w.data(), nullptr};
  args.input_infos = {TensorInfo{true, "float32", {2, 3, 4}}, TensorInfo{true, "float32", {4}},
                      TensorInfo{false, "", {}}};
  args.outputs = {y.data()};
  args.output_infos = {TensorInfo{true, "float32", {2, 3, 4}}};
  args.attrs = {1e-5};
  args.parallel_for = SerialFor;
  const Status status = LaunchRmsNorm(args);
  ASSERT_TRUE(status.ok()) << status.message();
  ExpectClose(y, ReferenceForward<float>(x, w, nullptr, rows, cols, 1e-5), 1e-5, "y via LaunchRmsNorm");
}

// ---- Shape and dtype rule ----

TensorInfo Info(const char* dtype, Shape shape) { return TensorInfo{true, dtype, std::move(shape)}; }
TensorInfo Absent() { return TensorInfo{false, "", {}}; }

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RmsNormInfer, RejectsZeroDimX) {
  std::vector<TensorInfo> outputs;
  const Status status = InferRmsNorm({Info("float32", {}), Info("float32", {1}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "at least 1 dimension")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "'x'")) << status.message();
}

TEST(RmsNormInfer, RejectsWeightOfWrongLength) {
  std::vector<TensorInfo> outputs;
  const Status status = InferRmsNorm({Info("float32", {2, 8}), Info("float32", {7}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "'weight'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "got shape [7]")) << status.message();
}

TEST(RmsNormInfer, RejectsWeightOfWrongRank) {
  std::vector<TensorInfo> outputs;
  const Status status = InferRmsNorm({Info("float32", {2, 8}), Info("float32", {1, 8}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "'weight'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "got shape [1, 8]")) << status.message();
}

TEST(RmsNormInfer, RejectsBiasOfWrongLength) {
  std::vector<TensorInfo> outputs;
  const Status status =
      InferRmsNorm({Info("float32", {2, 8}), Info("float32", {8}), Info("float32", {9})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "'bias'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "got shape [9]")) << status.message();
}

TEST(RmsNormInfer, RejectsWeightDtypeDifferentFromX) {
  std::vector<TensorInfo> outputs;
  const Status status = InferRmsNorm({Info("float32", {2, 8}), Info("float64", {8}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "'weight'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "float64")) << status.message();
}

TEST(RmsNormInfer, RejectsIntegerX) {
  std::vector<TensorInfo> outputs;
  const Status status = InferRmsNorm({Info("int64", {2, 8}), Info("int64", {8}), Absent()}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "rms_norm")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "'x'")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "int64")) << status.message();
}

TEST(RmsNormInfer, UnknownDimsPass) {
  const std::vector<std::vector<TensorInfo>> cases = {
      {Info("float32", {-1, -1}), Info("float32", {-1}), Info("float32", {-1})},
      {Info("float32", {-1, 8}), Info("float32", {8}), Absent()},
      {Info("float64", {2, -1}), Info("float64", {7}), Info("float64", {7})},
      {Info("float64", {4, 8}), Info("float64", {-1}), Info("float64", {8})},
  };
  for (const auto& inputs : cases) {
    std::vector<TensorInfo> outputs;
    const Status status = InferRmsNorm(inputs, &outputs);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].shape, inputs[0].shape);
    EXPECT_EQ(outputs[0].dtype, inputs[0].dtype);
  }
}

TEST(RmsNormInfer, OutputHasDtypeAndShapeOfX) {
  for (const char* dtype : {"float32", "float64"}) {
    std::vector<TensorInfo> outputs;
    const Status status =
        InferRmsNorm({Info(dtype, {2, 3, 5}), Info(dtype, {5}), Info(dtype, {5})}, &outputs);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(outputs[0].present);
    EXPECT_EQ(outputs[0].dtype, dtype);
    EXPECT_EQ(outputs[0].shape, (Shape{2, 3, 5}));
  }
}

}  // namespace
}  // namespace opbridge
