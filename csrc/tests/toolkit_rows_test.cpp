// The kernel toolkit's row skeleton (opbridge/toolkit/rows-inl.h, rows.h),
// used as an operator library outside opbridge would use it: a norm of
// x + residual from two row sums (sum s and sum s^2), with a weight, a bias
// and the sum as a second output, and its backward with per-column weight
// and bias gradients. Checked against a scalar double reference in every
// dtype, on rows that end in partial vectors, on every SIMD target, on rows
// whose float32 squares overflow, and for column sums that do not depend on
// the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/toolkit_rows_test.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"

HWY_BEFORE_NAMESPACE();
namespace user_norm {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = ::opbridge::HWY_NAMESPACE::toolkit::rows;
using ::opbridge::ComputeType;
using ::opbridge::toolkit::RowRange;
using ::opbridge::toolkit::RowTensors;

// Forward, per row: s = x + residual (as T holds it, written to out[1]);
// mean = sum(s) / n, var = sum(s^2) / n - mean^2;
// y = (s - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps).
// Slots: in = {x, residual}, columns = {w, b}, out = {y, s}, per-row out =
// {mean} (optional), params = {eps}.
template <typename T>
void ForwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const double n = static_cast<double>(t.cols);
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    // Pass 1 (from memory): the sum, written out, and its two row sums.
    const auto sums = rows::ForColumns(
        rows::PassOf(t).Write(row.out[1]),
        [](auto d, auto x, auto r) {
          const auto s = rows::Round<T>(d, hn::Add(x, r));
          return rows::Writes(s) + rows::Sums(s) + rows::SumProducts(s, s);
        },
        row.in[0], row.in[1]);
    const double mean = sums[0] / n;
    const double var = std::max(0.0, sums[1] / n - mean * mean);
    const C rstd = static_cast<C>(1.0 / std::sqrt(var + t.params[0]));
    const C shift = static_cast<C>(-mean * static_cast<double>(rstd));
    // Pass 2 (the sum from cache): y, while the next row's inputs arrive.
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]).Prefetch(row.next[1]),
        [rstd, shift](auto d, auto s, auto w, auto b) {
          return rows::Writes(hn::MulAdd(hn::MulAdd(s, hn::Set(d, rstd), hn::Set(d, shift)), w, b));
        },
        static_cast<const T*>(row.out[1]), t.columns[0], t.columns[1]);
    // The row's mean, where a per-row output takes it.
    if (row.per_row_out[0] != nullptr) *row.per_row_out[0] = opbridge::FromDouble<T>(mean);
  });
}

// Backward from the saved sum s, per row, with xhat = (s - mean) * rstd and
// gw = g * w: ds = rstd * (gw - mean(gw) - xhat * mean(gw * xhat));
// grad_w = sum over rows of g * xhat, grad_b = sum of g.
// Slots: in = {g, s}, columns = {w}, out = {ds}, column sums {grad_w, grad_b}.
template <typename T>
void BackwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const double n = static_cast<double>(t.cols);
  rows::ForEachRowWithColumnSums(t, range, [&](const rows::Row<T>& row, C* const* columns) {
    const auto sums = rows::ForColumns(
        rows::PassOf(t),
        [](auto, auto g, auto s, auto w) {
          const auto gw = hn::Mul(g, w);
          return rows::Sums(s, gw) + rows::SumProducts(s, s, gw, s);
        },
        row.in[0], row.in[1], t.columns[0]);
    const double mean = sums[0] / n;
    const double rstd = 1.0 / std::sqrt(std::max(0.0, sums[2] / n - mean * mean) + t.params[0]);
    const double mean_gw = sums[1] / n;
    const double mean_gw_xhat = rstd * (sums[3] / n - mean * mean_gw);
    // ds = rstd * gw + a + b * s; xhat = rstd * s - rstd * mean.
    const C rstd_c = static_cast<C>(rstd), a = static_cast<C>(rstd * (rstd * mean * mean_gw_xhat - mean_gw));
    const C b = static_cast<C>(-rstd * rstd * mean_gw_xhat), xhat_shift = static_cast<C>(-rstd * mean);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).ColumnSums(columns).Prefetch(row.next[0]).Prefetch(row.next[1]),
        [rstd_c, a, b, xhat_shift](auto d, auto g, auto s, auto w) {
          const auto rstd_v = hn::Set(d, rstd_c);
          const auto ds = hn::MulAdd(rstd_v, hn::Mul(g, w), hn::MulAdd(hn::Set(d, b), s, hn::Set(d, a)));
          const auto xhat = hn::MulAdd(s, rstd_v, hn::Set(d, xhat_shift));
          return rows::Writes(ds) + rows::ColumnProducts(g, xhat) + rows::Columns(g);
        },
        row.in[0], row.in[1], t.columns[0]);
  });
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(UserNormForwardRows, ForwardRange);
OPBRIDGE_ROWS_ENTRY_POINTS(UserNormBackwardRows, BackwardRange);

}  // namespace HWY_NAMESPACE
}  // namespace user_norm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/simd.h"
#include "tests/test_util.h"

namespace user_norm {

using opbridge::BFloat16;
using opbridge::Float16;
using opbridge::ParallelFor;
using opbridge::toolkit::RowRange;
using opbridge::toolkit::RowTensors;

OPBRIDGE_ROWS_EXPORT(UserNormForwardRows);
OPBRIDGE_ROWS_EXPORT(UserNormBackwardRows);

// The host side of the norm, as an operator's kernel.cpp has it.
template <typename T>
void UserNormForward(const T* x, const T* residual, const T* w, const T* b, T* y, T* sum, int64_t rows,
                     int64_t cols, double eps, const ParallelFor& parallel_for) {
  RowTensors<T> t;
  t.in[0] = x;
  t.in[1] = residual;
  t.columns[0] = w;
  t.columns[1] = b;
  t.out[0] = y;
  t.out[1] = sum;
  t.cols = cols;
  t.params[0] = opbridge::toolkit::RowsComputeScalar<T>(eps);
  t.stream = opbridge::toolkit::RowsStreamOutput<T>(2 * rows * cols);
  opbridge::toolkit::ForRowRanges(rows, cols, parallel_for,
                                  [&](const RowRange& range) { UserNormForwardRows<T>(t, range); });
}

template <typename T>
void UserNormBackward(const T* g, const T* sum, const T* w, T* ds, T* grad_w, T* grad_b, int64_t rows,
                      int64_t cols, double eps, const ParallelFor& parallel_for) {
  RowTensors<T> t;
  t.in[0] = g;
  t.in[1] = sum;
  t.columns[0] = w;
  t.out[0] = ds;
  t.cols = cols;
  t.params[0] = opbridge::toolkit::RowsComputeScalar<T>(eps);
  t.stream = opbridge::toolkit::RowsStreamOutput<T>(rows * cols);
  opbridge::toolkit::ForRowChunksWithColumnSums<T>(
      rows, cols, {grad_w, grad_b}, parallel_for,
      [&](const RowRange& range) { UserNormBackwardRows<T>(t, range); });
}

namespace {

constexpr double kEps = 1e-5;

template <typename T>
double D(T v) {
  return static_cast<double>(opbridge::ToFloat(v));
}

template <typename T>
std::vector<double> Doubles(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = D(v[i]);
  return out;
}

// Relative to the magnitude of O(1) values: a few units in the last place of
// the compute type, the storage type's rounding for 16-bit outputs.
template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  if constexpr (std::is_same_v<T, Float16>) return 4e-3;
  return 3e-2;
}

struct Problem {
  int64_t rows, cols;
};

// Row lengths that leave a partial vector at every vector width (and one
// that is a multiple of all of them), one past the float accumulation block,
// many short rows.
const std::vector<Problem>& Problems() {
  static const std::vector<Problem> problems = {{1, 1}, {3, 7}, {5, 37}, {40, 64}, {2, 4099}, {300, 5}};
  return problems;
}

struct Reference {
  std::vector<double> y, sum, ds, grad_w, grad_b;
};

// The norm in double from the inputs as given (the sum rounded to T, as the
// kernel stores and normalizes it).
template <typename T>
Reference ReferenceOf(const std::vector<T>& x, const std::vector<T>& r, const std::vector<T>& w,
                      const std::vector<T>& b, const std::vector<T>& g, int64_t rows, int64_t cols) {
  Reference ref;
  const size_t n = x.size();
  ref.y.resize(n);
  ref.sum.resize(n);
  ref.ds.resize(n);
  ref.grad_w.assign(static_cast<size_t>(cols), 0.0);
  ref.grad_b.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const size_t row = static_cast<size_t>(i * cols);
    double mean = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = row + static_cast<size_t>(j);
      ref.sum[k] = D(opbridge::FromDouble<T>(D(x[k]) + D(r[k])));
      mean += ref.sum[k];
    }
    mean /= static_cast<double>(cols);
    double var = 0.0;
    for (int64_t j = 0; j < cols; ++j) var += (ref.sum[row + j] - mean) * (ref.sum[row + j] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(cols) + kEps);
    double mean_gw = 0.0, mean_gw_xhat = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = row + static_cast<size_t>(j);
      const double xhat = (ref.sum[k] - mean) * rstd;
      ref.y[k] = xhat * D(w[j]) + D(b[j]);
      mean_gw += D(g[k]) * D(w[j]);
      mean_gw_xhat += D(g[k]) * D(w[j]) * xhat;
      ref.grad_w[j] += D(g[k]) * xhat;
      ref.grad_b[j] += D(g[k]);
    }
    mean_gw /= static_cast<double>(cols);
    mean_gw_xhat /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = row + static_cast<size_t>(j);
      const double xhat = (ref.sum[k] - mean) * rstd;
      ref.ds[k] = rstd * (D(g[k]) * D(w[j]) - mean_gw - xhat * mean_gw_xhat);
    }
  }
  return ref;
}

template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  opbridge::testing::ExpectNear(Doubles(got), want, tol, what);
}

template <typename T>
void CheckAgainstReference(const std::string& label) {
  for (const Problem& p : Problems()) {
    const int64_t n = p.rows * p.cols;
    const auto x = opbridge::testing::RandomOf<T>(n, 1), r = opbridge::testing::RandomOf<T>(n, 2),
               g = opbridge::testing::RandomOf<T>(n, 3);
    const auto w = opbridge::testing::RandomOf<T>(p.cols, 4, 0.5, 1.5),
               b = opbridge::testing::RandomOf<T>(p.cols, 5);
    std::vector<T> y(x.size()), sum(x.size()), ds(x.size()), gw(w.size()), gb(w.size());
    UserNormForward<T>(x.data(), r.data(), w.data(), b.data(), y.data(), sum.data(), p.rows, p.cols, kEps,
                       opbridge::SerialFor);
    UserNormBackward<T>(g.data(), sum.data(), w.data(), ds.data(), gw.data(), gb.data(), p.rows, p.cols, kEps,
                        opbridge::SerialFor);
    const Reference ref = ReferenceOf(x, r, w, b, g, p.rows, p.cols);
    const std::string what = label + " [" + std::to_string(p.rows) + ", " + std::to_string(p.cols) + "] ";
    const double tol = Tolerance<T>();
    ExpectNear(sum, ref.sum, 0.0, what + "sum (x + residual as stored)");
    ExpectNear(y, ref.y, tol, what + "y");
    ExpectNear(ds, ref.ds, 4 * tol, what + "grad_sum");
    // Sums over the rows: float32 over 8 rows, then double; the storage
    // type's rounding of the total dominates.
    ExpectNear(gw, ref.grad_w, 2 * tol, what + "grad_w");
    ExpectNear(gb, ref.grad_b, 2 * tol, what + "grad_b");
  }
}

TEST(ToolkitRows, NormMatchesDoubleReferenceFloat) { CheckAgainstReference<float>("float32"); }
TEST(ToolkitRows, NormMatchesDoubleReferenceDouble) { CheckAgainstReference<double>("float64"); }
TEST(ToolkitRows, NormMatchesDoubleReferenceFloat16) { CheckAgainstReference<Float16>("float16"); }
TEST(ToolkitRows, NormMatchesDoubleReferenceBFloat16) { CheckAgainstReference<BFloat16>("bfloat16"); }

// Restores the default target when a test ends, pass or fail.
using opbridge::testing::ForcedTarget;

TEST(ToolkitRows, EveryTargetMatchesTheReference) {
  for (const std::string& target : opbridge::SimdTargets()) {
    ForcedTarget forced(target);
    CheckAgainstReference<float>(target + " float32");
    CheckAgainstReference<Float16>(target + " float16");
    CheckAgainstReference<BFloat16>(target + " bfloat16");
  }
}

// Squares past float32's range (|s| > 1.8e19): the row sums are taken again
// in double lanes, and the row normalizes as any other.
TEST(ToolkitRows, RowWhoseFloatSquaresOverflowIsSummedInDouble) {
  for (const int64_t cols : {int64_t{5}, int64_t{37}, int64_t{1030}}) {
    auto x = opbridge::testing::RandomOf<float>(2 * cols, 6, 1e20, 3e20);
    const auto r = std::vector<float>(x.size(), 0.0f), g = opbridge::testing::RandomOf<float>(x.size(), 7);
    const auto w = opbridge::testing::RandomOf<float>(cols, 8, 0.5, 1.5),
               b = opbridge::testing::RandomOf<float>(cols, 9);
    for (int64_t j = 0; j < cols; j += 2)
      x[static_cast<size_t>(cols + j)] = -x[static_cast<size_t>(cols + j)];
    std::vector<float> y(x.size()), sum(x.size()), ds(x.size()), gw(w.size()), gb(w.size());
    UserNormForward<float>(x.data(), r.data(), w.data(), b.data(), y.data(), sum.data(), 2, cols, kEps,
                           opbridge::SerialFor);
    UserNormBackward<float>(g.data(), sum.data(), w.data(), ds.data(), gw.data(), gb.data(), 2, cols, kEps,
                            opbridge::SerialFor);
    Reference ref = ReferenceOf(x, r, w, b, g, 2, cols);
    const std::string what = "cols " + std::to_string(cols) + " ";
    // The naive variance loses digits to mean^2 in the first (one-signed) row.
    ExpectNear(y, ref.y, 1e-4, what + "y");
    for (size_t i = 0; i < ref.ds.size(); ++i) ref.ds[i] *= 1e20;  // ds ~ 1 / |s|
    std::vector<double> scaled(ds.size());
    for (size_t i = 0; i < ds.size(); ++i) scaled[i] = static_cast<double>(ds[i]) * 1e20;
    opbridge::testing::ExpectNear(scaled, ref.ds, 1e-3, what + "grad_sum");
    ExpectNear(gw, ref.grad_w, 1e-3, what + "grad_w");
  }
}

// A parallel-for that runs the ranges on `threads` real threads at once.
ParallelFor ThreadedFor(int threads) {
  return [threads](int64_t n, int64_t grain, const opbridge::RangeBody& body) {
    if (n <= 0) return;
    const int64_t per = std::max<int64_t>(grain, (n + threads - 1) / threads);
    std::vector<std::thread> pool;
    for (int64_t begin = 0; begin < n; begin += per) {
      pool.emplace_back([&body, begin, end = std::min(n, begin + per)] { body(begin, end); });
    }
    for (auto& thread : pool) thread.join();
  };
}

template <typename T>
void CheckColumnSumsIndependentOfThreads() {
  // Several chunks of rows (ChunkedColumnSums cuts by shape), ending in a
  // partial vector.
  const int64_t rows = 2000, cols = 37;
  const auto g = opbridge::testing::RandomOf<T>(rows * cols, 10),
             s = opbridge::testing::RandomOf<T>(rows * cols, 11);
  const auto w = opbridge::testing::RandomOf<T>(cols, 12, 0.5, 1.5);
  std::vector<T> ds0(g.size()), gw0(w.size()), gb0(w.size());
  UserNormBackward<T>(g.data(), s.data(), w.data(), ds0.data(), gw0.data(), gb0.data(), rows, cols, kEps,
                      opbridge::SerialFor);
  const std::vector<std::pair<std::string, ParallelFor>> fors = {
      {"one row at a time, last first", opbridge::testing::ReverseChunkedFor(1)},
      {"2 threads", ThreadedFor(2)},
      {"3 threads", ThreadedFor(3)},
      {"8 threads", ThreadedFor(8)}};
  for (const auto& [label, parallel_for] : fors) {
    std::vector<T> ds(g.size()), gw(w.size()), gb(w.size());
    UserNormBackward<T>(g.data(), s.data(), w.data(), ds.data(), gw.data(), gb.data(), rows, cols, kEps,
                        parallel_for);
    EXPECT_EQ(std::memcmp(ds.data(), ds0.data(), ds.size() * sizeof(T)), 0) << "grad_sum, " << label;
    EXPECT_EQ(std::memcmp(gw.data(), gw0.data(), gw.size() * sizeof(T)), 0) << "grad_w, " << label;
    EXPECT_EQ(std::memcmp(gb.data(), gb0.data(), gb.size() * sizeof(T)), 0) << "grad_b, " << label;
  }
}

TEST(ToolkitRows, ColumnSumsDoNotDependOnThreadsFloat) { CheckColumnSumsIndependentOfThreads<float>(); }
TEST(ToolkitRows, ColumnSumsDoNotDependOnThreadsBFloat16) { CheckColumnSumsIndependentOfThreads<BFloat16>(); }

TEST(ToolkitRows, EmptyProblems) {
  std::vector<float> gw(3, 7.0f), gb(3, 7.0f);
  // No rows: the column sums are zero; no columns: nothing is touched.
  UserNormBackward<float>(nullptr, nullptr, nullptr, nullptr, gw.data(), gb.data(), 0, 3, kEps,
                          opbridge::SerialFor);
  EXPECT_EQ(gw, std::vector<float>(3, 0.0f));
  EXPECT_EQ(gb, std::vector<float>(3, 0.0f));
  UserNormForward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, kEps,
                         opbridge::SerialFor);
  // A column sum not wanted (null) is skipped.
  const auto g = opbridge::testing::RandomOf<float>(6, 13), s = opbridge::testing::RandomOf<float>(6, 14),
             w = opbridge::testing::RandomOf<float>(3, 15);
  std::vector<float> ds(6), only_w(3);
  UserNormBackward<float>(g.data(), s.data(), w.data(), ds.data(), only_w.data(), nullptr, 2, 3, kEps,
                          opbridge::SerialFor);
  const Reference ref = ReferenceOf(s, std::vector<float>(6, 0.0f), w, w, g, 2, 3);
  ExpectNear(only_w, ref.grad_w, 1e-5, "grad_w without grad_b");
}

// The norm as an operator's launch has it: its KernelArgs bound to the row
// kernel through toolkit::LaunchRows, every tensor checked before it runs.
const opbridge::OpSpec kUserNormSpec =
    opbridge::OpSpec::Builder("user_norm", "UserNorm")
        .Doc("The row skeleton's test norm of x + residual, with the sum and each row's mean.")
        .Inputs({opbridge::Input("x"), opbridge::Input("residual"), opbridge::Input("weight"),
                 opbridge::Input("bias")})
        .Attrs({opbridge::Attr::Float("eps", kEps)})
        .Outputs({"y", "sum", "mean"});

opbridge::Status LaunchUserNorm(const opbridge::KernelArgs& args) {
  return opbridge::toolkit::LaunchRows(
      kUserNormSpec, args, 0,
      [&](auto& b) {
        b.In(0, 0).In(1, 1).Column(0, 2).Column(1, 3).Out(0, 0).Out(1, 1).PerRowOut(0, 2);
        b.Param(0, args.attrs[0].number);
      },
      [&](const auto& t, int64_t rows) {
        using T = typename std::decay_t<decltype(t)>::Storage;
        opbridge::toolkit::ForRowRanges(rows, t.cols, args.parallel_for,
                                        [&](const RowRange& range) { UserNormForwardRows<T>(t, range); });
      });
}

// Buffers of a float32 [rows, cols] user_norm call, filled with a sentinel;
// `mean_info` is what the shape rule gave the mean.
struct UserNormCall {
  UserNormCall(int64_t rows, int64_t cols, opbridge::TensorInfo mean_info)
      : x(opbridge::testing::RandomOf<float>(rows * cols, 21)),
        r(opbridge::testing::RandomOf<float>(rows * cols, 22)),
        w(opbridge::testing::RandomOf<float>(cols, 23)),
        b(opbridge::testing::RandomOf<float>(cols, 24)),
        y(rows * cols + 64, kSentinel),
        s(rows * cols + 64, kSentinel),
        mean(rows + 64, kSentinel) {
    using opbridge::testing::Info;
    args.inputs = {x.data(), r.data(), w.data(), b.data()};
    args.input_infos = {Info("float32", {rows, cols}), Info("float32", {rows, cols}), Info("float32", {cols}),
                        Info("float32", {cols})};
    args.outputs = {y.data(), s.data(), mean.data()};
    args.output_infos = {Info("float32", {rows, cols}), Info("float32", {rows, cols}), std::move(mean_info)};
    args.attrs = {opbridge::AttrValue(kEps)};
    args.parallel_for = opbridge::SerialFor;
  }
  bool Untouched() const {
    for (const auto* v : {&y, &s, &mean}) {
      for (float e : *v) {
        if (std::memcmp(&e, &kSentinel, sizeof e) != 0) return false;
      }
    }
    return true;
  }
  static constexpr float kSentinel = 12345.0f;
  std::vector<float> x, r, w, b, y, s, mean;
  opbridge::KernelArgs args;
};

TEST(ToolkitRows, LaunchRowsWritesPerRowOutputs) {
  const int64_t rows = 5, cols = 37;
  UserNormCall call(rows, cols, opbridge::testing::Info("float32", {rows}));
  ASSERT_TRUE(LaunchUserNorm(call.args).ok());
  for (int64_t i = 0; i < rows; ++i) {
    double want = 0.0;
    for (int64_t j = 0; j < cols; ++j)
      want += D(opbridge::FromDouble<float>(D(call.x[i * cols + j]) + D(call.r[i * cols + j])));
    EXPECT_NEAR(call.mean[i], want / cols, 1e-5) << i;
  }
  EXPECT_EQ(call.mean[rows], UserNormCall::kSentinel);
  EXPECT_EQ(call.y[rows * cols], UserNormCall::kSentinel);
}

// The mistakes a shape rule can make about its kernel's outputs: each an
// error naming the op, the output and both sizes, with nothing written.
TEST(ToolkitRows, LaunchRowsRefusesAPerRowOutputOfAnotherSize) {
  UserNormCall call(8, 16, opbridge::testing::Info("float32", {}));
  const opbridge::Status status = LaunchUserNorm(call.args);
  ASSERT_FALSE(status.ok());
  const std::string& m = status.message();
  EXPECT_TRUE(opbridge::testing::Contains(m, "user_norm")) << m;
  EXPECT_TRUE(opbridge::testing::Contains(m, "output 'mean' is float32 [], 1 element by the shape rule"))
      << m;
  EXPECT_TRUE(opbridge::testing::Contains(m, "the kernel writes 8 float32 values (one per row)")) << m;
  EXPECT_TRUE(call.Untouched());
}

TEST(ToolkitRows, LaunchRowsRefusesAnOutputOfAnotherDtype) {
  UserNormCall call(8, 16, opbridge::testing::Info("float64", {8}));
  const opbridge::Status status = LaunchUserNorm(call.args);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "output 'mean' is float64 [8], 8 elements"))
      << status.message();
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "writes 8 float32 values")) << status.message();
  EXPECT_TRUE(call.Untouched());
}

TEST(ToolkitRows, LaunchRowsRefusesARowOutputOrInputOfAnotherSize) {
  UserNormCall call(8, 16, opbridge::testing::Info("float32", {8}));
  call.args.output_infos[0].shape = {8, 1};
  opbridge::Status status = LaunchUserNorm(call.args);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "output 'y' is float32 [8, 1], 8 elements"))
      << status.message();
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "writes 128 float32 values (rows x cols)"))
      << status.message();
  call.args.output_infos[0].shape = {8, 16};
  call.args.input_infos[3].shape = {15};
  status = LaunchUserNorm(call.args);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "input 'bias' is float32 [15], 15 elements"))
      << status.message();
  EXPECT_TRUE(opbridge::testing::Contains(status.message(), "reads 16 float32 values (one per column)"))
      << status.message();
  EXPECT_TRUE(call.Untouched());
}

}  // namespace
}  // namespace user_norm
#endif  // HWY_ONCE
