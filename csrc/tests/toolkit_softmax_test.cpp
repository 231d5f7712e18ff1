// The row skeleton's maxima (rows::Maxes) and the online softmax statistics
// (rows::MaxAndSumExp), as a softmax-like operator outside opbridge uses
// them: softmax over the last dimension with its logsumexp as a per-row
// output, written both ways (three passes: the maximum, exp(z - max) with
// its sum, the scaling; or two: the online maximum and sum, then the
// output). Checked against a scalar double reference in every dtype, on rows
// that end in partial vectors, on every SIMD target, and on rows holding
// -inf, +inf and NaN, and empty rows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/toolkit_softmax_test.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/math-inl.h"
#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"

HWY_BEFORE_NAMESPACE();
namespace user_softmax {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = ::opbridge::HWY_NAMESPACE::toolkit::rows;
namespace tk = ::opbridge::HWY_NAMESPACE::toolkit;
using ::opbridge::ComputeType;
using ::opbridge::toolkit::RowRange;
using ::opbridge::toolkit::RowTensors;

// Slots: in = {x}, out = {y}, per-row out = {lse}; z = x * params[0].
// Three passes: max(z); e = exp(z - max) into y, sum(e); y = e / sum.
template <typename T>
void ThreePassRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const C scale = static_cast<C>(t.params[0]);
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const double max = rows::ForColumns(
        rows::PassOf(t), [scale](auto d, auto x) { return rows::Maxes(hn::Mul(x, hn::Set(d, scale))); },
        row.in[0])[0];
    // A row of -inf only (or none): e = exp(-inf) = 0, so lse = -inf and
    // y = 0 / 0, NaN, as torch gives.
    const C shift = static_cast<C>(max == -HUGE_VAL ? 0.0 : max);
    const double sum = rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).Stream(false),
        [scale, shift](auto d, auto x) {
          const auto e = tk::Exp(d, hn::Sub(hn::Mul(x, hn::Set(d, scale)), hn::Set(d, shift)));
          return rows::Writes(e) + rows::Sums(e);
        },
        row.in[0])[0];
    const C inv = static_cast<C>(1.0 / sum);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]),
        [inv](auto d, auto e) { return rows::Writes(hn::Mul(e, hn::Set(d, inv))); },
        static_cast<const T*>(row.out[0]));
    *row.per_row_out[0] = opbridge::FromDouble<T>(max + std::log(sum));
  });
}

// Two passes: the online max and sum; y = exp(z - lse).
template <typename T>
void OnlineRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const C scale = static_cast<C>(t.params[0]);
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const auto stats = rows::MaxAndSumExp(
        rows::PassOf(t), [scale](auto d, auto x) { return hn::Mul(x, hn::Set(d, scale)); }, row.in[0]);
    const double lse = stats[0] + std::log(stats[1]);
    const C shift = static_cast<C>(lse);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]),
        [scale, shift](auto d, auto x) {
          return rows::Writes(tk::Exp(d, hn::Sub(hn::Mul(x, hn::Set(d, scale)), hn::Set(d, shift))));
        },
        row.in[0]);
    *row.per_row_out[0] = opbridge::FromDouble<T>(lse);
  });
}

// Per row, the maximum and the minimum (as -max(-x)) of x and the sum of x,
// from one pass: out = {}, per-row out = {max, min, sum}.
template <typename T>
void StatsRange(const RowTensors<T>& t, const RowRange& range) {
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const auto stats = rows::ForColumns(
        rows::PassOf(t), [](auto, auto x) { return rows::Sums(x) + rows::Maxes(x, hn::Neg(x)); }, row.in[0]);
    *row.per_row_out[0] = opbridge::FromDouble<T>(stats[1]);
    *row.per_row_out[1] = opbridge::FromDouble<T>(-stats[2]);
    *row.per_row_out[2] = opbridge::FromDouble<T>(stats[0]);
  });
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(ThreePassRows, ThreePassRange);
OPBRIDGE_ROWS_ENTRY_POINTS(OnlineRows, OnlineRange);
OPBRIDGE_ROWS_ENTRY_POINTS(StatsRows, StatsRange);

}  // namespace HWY_NAMESPACE
}  // namespace user_softmax
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/simd.h"
#include "tests/test_util.h"

namespace user_softmax {

using opbridge::BFloat16;
using opbridge::Float16;
using opbridge::toolkit::RowRange;
using opbridge::toolkit::RowTensors;

OPBRIDGE_ROWS_EXPORT(ThreePassRows);
OPBRIDGE_ROWS_EXPORT(OnlineRows);
OPBRIDGE_ROWS_EXPORT(StatsRows);

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kScale = 0.75;

template <typename T>
std::vector<double> Doubles(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      out[i] = static_cast<double>(v[i]);
    } else {
      out[i] = static_cast<double>(opbridge::ToFloat(v[i]));
    }
  }
  return out;
}

template <typename T>
std::vector<T> Of(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = opbridge::FromDouble<T>(v[i]);
  return out;
}

// The row's softmax and logsumexp of z = x * scale (x as T holds it), in
// double: a row with NaN is NaN; a row of -inf only (or none) has lse -inf
// and y NaN (as torch); a row with +inf is NaN (inf - inf).
void Reference(const std::vector<double>& x, int64_t rows, int64_t cols, double scale, std::vector<double>* y,
               std::vector<double>* lse) {
  y->assign(x.size(), 0.0);
  lse->assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* z = x.data() + r * cols;
    double max = -kInf;
    bool nan = false;
    for (int64_t j = 0; j < cols; ++j) {
      nan = nan || std::isnan(z[j]);
      max = std::max(max, z[j] * scale);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(z[j] * scale - max);
    const double l = nan ? std::nan("") : max == -kInf ? -kInf : max + std::log(sum);
    (*lse)[static_cast<size_t>(r)] = l;
    for (int64_t j = 0; j < cols; ++j) (*y)[static_cast<size_t>(r * cols + j)] = std::exp(z[j] * scale - l);
  }
}

template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-13;
  if constexpr (std::is_same_v<T, float>) return 2e-6;
  if constexpr (std::is_same_v<T, Float16>) return 2e-3;
  return 1.6e-2;
}

// got within tol relative (or absolute below 1) of want; NaN where want is
// NaN, the same infinity where want is infinite.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i])   ? std::isnan(got[i])
                    : std::isinf(want[i]) ? got[i] == want[i]
                                          : std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i]));
    if (!ok && ++failures <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

enum class Form { kThreePass, kOnline };

template <typename T>
void Run(Form form, const std::vector<T>& x, int64_t rows, int64_t cols, std::vector<T>* y,
         std::vector<T>* lse) {
  y->assign(x.size(), opbridge::FromDouble<T>(0.0));
  lse->assign(static_cast<size_t>(rows), opbridge::FromDouble<T>(0.0));
  RowTensors<T> t;
  t.in[0] = x.data();
  t.out[0] = y->data();
  t.per_row_out[0] = lse->data();
  t.cols = cols;
  t.params[0] = kScale;
  t.stream = opbridge::toolkit::RowsStreamOutput<T>(rows * cols);
  opbridge::toolkit::ForRowRanges(rows, cols, opbridge::testing::ReverseChunkedFor(3),
                                  [&](const RowRange& r) {
                                    if (form == Form::kThreePass) {
                                      ThreePassRows<T>(t, r);
                                    } else {
                                      OnlineRows<T>(t, r);
                                    }
                                  });
}

template <typename T>
void CheckOnRows(Form form, const std::vector<double>& values, int64_t rows, int64_t cols,
                 const std::string& what) {
  const std::vector<T> x = Of<T>(values);
  std::vector<T> y, lse;
  Run<T>(form, x, rows, cols, &y, &lse);
  std::vector<double> want_y, want_lse;
  Reference(Doubles(x), rows, cols, kScale, &want_y, &want_lse);
  const std::string label = what + (form == Form::kThreePass ? " three-pass " : " online ") + "[" +
                            std::to_string(rows) + ", " + std::to_string(cols) + "] ";
  ExpectClose(Doubles(y), want_y, Tolerance<T>(), label + "y");
  ExpectClose(Doubles(lse), want_lse, Tolerance<T>(), label + "lse");
}

template <typename T>
void CheckAgainstReference(const std::string& what) {
  for (const int64_t cols :
       {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{37}, int64_t{1030}, int64_t{4100}}) {
    const int64_t rows = 5;
    const std::vector<double> x = opbridge::testing::Random<double>(rows * cols, 11, -30.0, 30.0);
    CheckOnRows<T>(Form::kThreePass, x, rows, cols, what);
    CheckOnRows<T>(Form::kOnline, x, rows, cols, what);
  }
}

TEST(ToolkitSoftmax, MatchesDoubleReferenceFloat) { CheckAgainstReference<float>("float32"); }
TEST(ToolkitSoftmax, MatchesDoubleReferenceDouble) { CheckAgainstReference<double>("float64"); }
TEST(ToolkitSoftmax, MatchesDoubleReferenceFloat16) { CheckAgainstReference<Float16>("float16"); }
TEST(ToolkitSoftmax, MatchesDoubleReferenceBFloat16) { CheckAgainstReference<BFloat16>("bfloat16"); }

using opbridge::testing::ForcedTarget;

TEST(ToolkitSoftmax, EveryTargetMatchesTheReference) {
  for (const std::string& target : opbridge::SimdTargets()) {
    ForcedTarget forced(target);
    CheckAgainstReference<float>(target + " float32");
    CheckAgainstReference<BFloat16>(target + " bfloat16");
  }
}

// Rows with a masked (-inf) entry, only -inf, a NaN, a +inf, and a growing
// maximum (the online form rescales its sums), on every target.
TEST(ToolkitSoftmax, InfinitiesAndNaNFollowTheReference) {
  const int64_t cols = 21;
  std::vector<std::vector<double>> rows_of = {
      std::vector<double>(cols, -kInf),
      opbridge::testing::Random<double>(cols, 3),
      opbridge::testing::Random<double>(cols, 4),
      opbridge::testing::Random<double>(cols, 5),
      {},
  };
  rows_of[1][4] = -kInf;
  rows_of[1][20] = -kInf;
  rows_of[2][17] = std::nan("");
  rows_of[3][9] = kInf;
  for (int64_t j = 0; j < cols; ++j) rows_of[4].push_back(static_cast<double>(j) * 10.0);
  std::vector<double> x;
  for (const auto& row : rows_of) x.insert(x.end(), row.begin(), row.end());
  const int64_t rows = static_cast<int64_t>(rows_of.size());
  for (const std::string& target : opbridge::SimdTargets()) {
    ForcedTarget forced(target);
    CheckOnRows<float>(Form::kThreePass, x, rows, cols, target + " float32");
    CheckOnRows<float>(Form::kOnline, x, rows, cols, target + " float32");
    CheckOnRows<double>(Form::kOnline, x, rows, cols, target + " float64");
  }
}

// Rows of no columns: the maximum is -inf and the sum 0 (the logsumexp of
// nothing is -inf).
TEST(ToolkitSoftmax, EmptyRowsHaveALogsumexpOfMinusInfinity) {
  const std::vector<float> x;
  std::vector<float> y, lse;
  RowTensors<float> t;
  t.in[0] = x.data();
  t.per_row_out[0] = nullptr;
  t.cols = 0;
  t.params[0] = 1.0;
  float out = 0.0f;
  t.per_row_out[0] = &out;
  OnlineRows<float>(t, RowRange{0, 1, {}});
  EXPECT_EQ(out, -std::numeric_limits<float>::infinity());
  out = 0.0f;
  ThreePassRows<float>(t, RowRange{0, 1, {}});
  EXPECT_EQ(out, -std::numeric_limits<float>::infinity());
}

// Maxes beside Sums in one pass, and a minimum as -max(-x): rows ending in
// a partial vector take no padding lane into the maximum (a row of negative
// values keeps its negative maximum).
TEST(ToolkitSoftmax, MaximaAndSumsFromOnePass) {
  for (const std::string& target : opbridge::SimdTargets()) {
    ForcedTarget forced(target);
    for (const int64_t cols : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{2050}}) {
      const int64_t rows = 3;
      std::vector<float> x = opbridge::testing::Random<float>(rows * cols, 21, -9.0, -1.0);
      for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(2 * cols + j)] += 10.0f;
      std::vector<float> max(rows), min(rows), sum(rows);
      RowTensors<float> t;
      t.in[0] = x.data();
      t.per_row_out[0] = max.data();
      t.per_row_out[1] = min.data();
      t.per_row_out[2] = sum.data();
      t.cols = cols;
      StatsRows<float>(t, RowRange{0, rows, {}});
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * cols;
        double want_sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) want_sum += row[j];
        const std::string what = target + " [" + std::to_string(cols) + "] row " + std::to_string(r);
        EXPECT_EQ(max[static_cast<size_t>(r)], *std::max_element(row, row + cols)) << what;
        EXPECT_EQ(min[static_cast<size_t>(r)], *std::min_element(row, row + cols)) << what;
        EXPECT_NEAR(sum[static_cast<size_t>(r)], want_sum, 1e-5 * (1.0 + std::fabs(want_sum))) << what;
      }
    }
  }
}

}  // namespace user_softmax
#endif  // HWY_ONCE
