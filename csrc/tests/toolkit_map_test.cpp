// The kernel toolkit's elementwise map (opbridge/toolkit/map-inl.h, map.h):
// four inputs, two outputs, per-column inputs, column sums, parameters, every
// dtype and SIMD target, lengths that leave partial vectors, and the
// KernelArgs launcher's layout rule and messages.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/toolkit_map_test.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/map-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// a * p0 + b * c - d: four inputs, one parameter.
struct FourInputs {
  explicit FourInputs(const tk::Params& p) : scale(p[0]) {}
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a, V b, V c, V e) const {
    return hn::Sub(hn::MulAdd(b, c, hn::Mul(a, tk::Set(d, scale))), e);
  }
  double scale;
};

// y = x + bias and s = x * p0 (summed over rows when a column sum).
struct AddAndScale {
  explicit AddAndScale(const tk::Params& p) : scale(p[0]) {}
  template <class D, class V>
  HWY_INLINE void operator()(D d, V x, V bias, V& y, V& s) const {
    y = hn::Add(x, bias);
    s = hn::Mul(x, tk::Set(d, scale));
  }
  double scale;
};

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

OPBRIDGE_MAP_KERNEL(opbridge, FourInputsKernel, FourInputs, 4, 1);
OPBRIDGE_MAP_KERNEL(opbridge, AddAndScaleKernel, AddAndScale, 2, 2);

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "opbridge/simd.h"
#include "ops/bias_gelu/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

template <typename T>
double D(T v) {
  return static_cast<double>(ToFloat(v));
}

// |got - want| <= tol (1 + |want|) everywhere, got of any of the four types.
template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  std::vector<double> wide(got.size());
  for (size_t i = 0; i < got.size(); ++i) wide[i] = D(got[i]);
  testing::ExpectNear(wide, want, tol, what);
}

template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-14;
  if constexpr (std::is_same_v<T, float>) return 1e-6;
  if constexpr (std::is_same_v<T, Float16>) return 2e-3;
  return 1.6e-2;
}

using opbridge::testing::ForcedTarget;

template <typename T>
void CheckFourInputs() {
  for (const std::string& target : SimdTargets()) {
    ForcedTarget forced(target);
    for (int64_t n : {1, 7, 33, 1037, 70001}) {
      const auto a = testing::RandomOf<T>(n, 1), b = testing::RandomOf<T>(n, 2),
                 c = testing::RandomOf<T>(n, 3), e = testing::RandomOf<T>(n, 4);
      std::vector<T> y(static_cast<size_t>(n));
      toolkit::Map<T>(FourInputsKernel, 1, n,
                      {toolkit::Full(a.data()), toolkit::Full(b.data()), toolkit::Full(c.data()),
                       toolkit::Full(e.data())},
                      {toolkit::Full(y.data())}, {1.5}, testing::ReverseChunkedFor(1000));
      std::vector<double> want(y.size());
      for (size_t i = 0; i < y.size(); ++i) want[i] = D(a[i]) * 1.5 + D(b[i]) * D(c[i]) - D(e[i]);
      ExpectNear(y, want, Tolerance<T>(), target + " n=" + std::to_string(n));
    }
  }
}

TEST(ToolkitMap, FourInputsEveryTargetFloat) { CheckFourInputs<float>(); }
TEST(ToolkitMap, FourInputsEveryTargetDouble) { CheckFourInputs<double>(); }
TEST(ToolkitMap, FourInputsEveryTargetFloat16) { CheckFourInputs<Float16>(); }
TEST(ToolkitMap, FourInputsEveryTargetBFloat16) { CheckFourInputs<BFloat16>(); }

// A per-column input and a column-sum output over shapes with partial
// vectors, whatever the parallel-for.
template <typename T>
void CheckBroadcastAndColumnSum() {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {9, 17}, {300, 129}, {3, 5000}}) {
    const auto x = testing::RandomOf<T>(rows * cols, 5), bias = testing::RandomOf<T>(cols, 6);
    std::vector<T> y(x.size()), s(static_cast<size_t>(cols)), y2(x.size()), s2(s.size());
    toolkit::Map<T>(AddAndScaleKernel, rows, cols, {toolkit::Full(x.data()), toolkit::PerColumn(bias.data())},
                    {toolkit::Full(y.data()), toolkit::ColumnSum(s.data())}, {2.0}, SerialFor);
    toolkit::Map<T>(AddAndScaleKernel, rows, cols, {toolkit::Full(x.data()), toolkit::PerColumn(bias.data())},
                    {toolkit::Full(y2.data()), toolkit::ColumnSum(s2.data())}, {2.0},
                    testing::ReverseChunkedFor(1));
    std::vector<double> want_y(x.size()), want_s(s.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        want_y[r * cols + j] = D(x[r * cols + j]) + D(bias[j]);
        want_s[j] += 2.0 * D(x[r * cols + j]);
      }
    }
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols);
    ExpectNear(y, want_y, Tolerance<T>(), what + " y");
    ExpectNear(s, want_s, Tolerance<T>() * 4, what + " column sum");
    EXPECT_EQ(std::memcmp(s.data(), s2.data(), s.size() * sizeof(T)), 0)
        << what << ": sums depend on threads";
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * sizeof(T)), 0) << what;
  }
}

TEST(ToolkitMap, BroadcastAndColumnSumFloat) { CheckBroadcastAndColumnSum<float>(); }
TEST(ToolkitMap, BroadcastAndColumnSumDouble) { CheckBroadcastAndColumnSum<double>(); }
TEST(ToolkitMap, BroadcastAndColumnSumBFloat16) { CheckBroadcastAndColumnSum<BFloat16>(); }

TEST(ToolkitMap, NullOutputIsSkippedAndNoRowsGiveZeroSums) {
  const int64_t rows = 4, cols = 19;
  const auto x = testing::RandomOf<float>(rows * cols, 7), bias = testing::RandomOf<float>(cols, 8);
  std::vector<float> y(x.size());
  toolkit::Map<float>(AddAndScaleKernel, rows, cols,
                      {toolkit::Full(x.data()), toolkit::PerColumn(bias.data())},
                      {toolkit::Full(y.data()), toolkit::ColumnSum(nullptr)}, {1.0}, SerialFor);
  for (int64_t i = 0; i < rows * cols; ++i) EXPECT_EQ(y[i], x[i] + bias[i % cols]) << i;
  std::vector<float> s(cols, 123.0f);
  toolkit::Map<float>(AddAndScaleKernel, 0, cols, {toolkit::Full(nullptr), toolkit::PerColumn(bias.data())},
                      {toolkit::Full(nullptr), toolkit::ColumnSum(s.data())}, {1.0}, SerialFor);
  for (float v : s) EXPECT_EQ(v, 0.0f);
}

KernelArgs ArgsFor(const std::string& dtype, const Shape& x_shape, const Shape& bias_shape, const void* x,
                   const void* bias, void* y, void* s) {
  KernelArgs args;
  args.inputs = {x, bias};
  args.input_infos = {testing::Info(dtype.c_str(), x_shape), testing::Info(dtype.c_str(), bias_shape)};
  args.outputs = {y, s};
  args.output_infos = {testing::Info(dtype.c_str(), x_shape), testing::Info(dtype.c_str(), bias_shape)};
  args.attrs = {};
  args.parallel_for = SerialFor;
  return args;
}

// The KernelArgs form: [cols] arguments against a larger input are per-column.
TEST(ToolkitMap, KernelArgsFindPerColumnArguments) {
  const auto x = testing::RandomOf<double>(2 * 3 * 5, 9), bias = testing::RandomOf<double>(5, 10);
  std::vector<double> y(x.size()), s(5);
  const KernelArgs args = ArgsFor("float64", {2, 3, 5}, {5}, x.data(), bias.data(), y.data(), s.data());
  ASSERT_TRUE(toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {3.0}).ok());
  for (int64_t j = 0; j < 5; ++j) {
    double want = 0.0;
    for (int64_t r = 0; r < 6; ++r) {
      EXPECT_DOUBLE_EQ(y[r * 5 + j], x[r * 5 + j] + bias[j]);
      want += 3.0 * x[r * 5 + j];
    }
    EXPECT_NEAR(s[j], want, 1e-13) << j;
  }
}

TEST(ToolkitMap, KernelArgsRefuseIntegerDtypeNamingTheArgument) {
  std::vector<int32_t> x(4), bias(2), y(4), s(2);
  const KernelArgs args = ArgsFor("int32", {2, 2}, {2}, x.data(), bias.data(), y.data(), s.data());
  const Status status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(), "bias_gelu")) << status.message();
  EXPECT_TRUE(testing::Contains(status.message(), "'x'")) << status.message();
  EXPECT_TRUE(testing::Contains(status.message(), "int32")) << status.message();
}

TEST(ToolkitMap, KernelArgsRefuseWrongArgumentCount) {
  std::vector<float> x(4), bias(2), y(4), s(2);
  KernelArgs args = ArgsFor("float32", {2, 2}, {2}, x.data(), bias.data(), y.data(), s.data());
  args.outputs = {args.outputs[0]};
  args.output_infos.pop_back();
  const Status status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(), "AddAndScaleKernel takes 2 inputs and 2 outputs"))
      << status.message();
}

// A shape rule that disagrees with the map: an error naming the op, the
// tensor and both sizes, before anything is written.
TEST(ToolkitMap, KernelArgsRefuseAnOutputOfAnotherSizeOrDtype) {
  const auto x = testing::RandomOf<float>(2 * 4, 11), bias = testing::RandomOf<float>(4, 12);
  std::vector<float> y(8, 7.0f), s(4, 7.0f);
  KernelArgs args = ArgsFor("float32", {2, 4}, {4}, x.data(), bias.data(), y.data(), s.data());
  args.output_infos[0].shape = {2, 1};
  Status status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(),
                                "output 'output 0' is float32 [2, 1], 2 elements by the shape rule"))
      << status.message();
  EXPECT_TRUE(testing::Contains(status.message(), "the kernel writes 8 float32 values")) << status.message();
  args.output_infos[0] = testing::Info("float64", {2, 4});
  status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(), "is float64 [2, 4], 8 elements")) << status.message();
  EXPECT_EQ(y, std::vector<float>(8, 7.0f));
  EXPECT_EQ(s, std::vector<float>(4, 7.0f));
}

// [rows, 1] has as many elements as [cols] when rows == cols: it is not a
// column sum, and the map refuses it.
TEST(ToolkitMap, KernelArgsDoNotTakeARowsByOneOutputForAColumnSum) {
  const auto x = testing::RandomOf<float>(4 * 4, 11), bias = testing::RandomOf<float>(4, 12);
  std::vector<float> y(16, 7.0f), s(4, 7.0f);
  KernelArgs args = ArgsFor("float32", {4, 4}, {4}, x.data(), bias.data(), y.data(), s.data());
  args.output_infos[0].shape = {4, 1};
  const Status status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(),
                                "is float32 [4, 1], 4 elements by the shape rule, but the kernel "
                                "writes 16 float32 values"))
      << status.message();
  EXPECT_EQ(y, std::vector<float>(16, 7.0f));
}

TEST(ToolkitMap, KernelArgsRefuseAnInputOfAnotherSize) {
  const auto x = testing::RandomOf<float>(2 * 4, 11), bias = testing::RandomOf<float>(4, 12);
  std::vector<float> y(8, 7.0f), s(4, 7.0f);
  KernelArgs args = ArgsFor("float32", {2, 4}, {3}, x.data(), bias.data(), y.data(), s.data());
  args.output_infos[1].shape = {4};
  const Status status = toolkit::Map(AddAndScaleKernel, kBiasGeluSpec, args, {1.0});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(testing::Contains(status.message(), "input 'input 1' is float32 [3], 3 elements"))
      << status.message();
  EXPECT_TRUE(testing::Contains(status.message(), "reads 8 float32 values")) << status.message();
  EXPECT_EQ(y, std::vector<float>(8, 7.0f));
}

}  // namespace
}  // namespace opbridge
#endif  // HWY_ONCE
