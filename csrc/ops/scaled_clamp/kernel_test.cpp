#include "ops/scaled_clamp/kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"
#include "ops/scaled_clamp/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

// clamp(x * scale, lo, hi) in long double, NaN propagating.
long double ReferenceForward(long double x, long double scale, long double lo, long double hi) {
  const long double v = x * scale;
  if (std::isnan(v)) return v;
  long double y = v < lo ? lo : v;
  y = y > hi ? hi : y;
  return y;
}

// Below, inside, at and above [min_val, max_val] for scale 1.5, [-1, 2].
std::vector<double> SampleInputs() {
  return {-100.0, -3.0,   -1.0,      -0.6666, -0.5, -0.25, 0.0,  1e-7, 0.1,  0.5,
          1.0,    1.3333, 4.0 / 3.0, 1.4,     2.0,  3.0,   50.0, 1e30, -1e30};
}

template <typename T>
void CheckForwardAgainstReference() {
  const ScaledClampAttrs attrs{1.5, -1.0, 2.0};
  std::vector<T> x;
  for (double v : SampleInputs()) x.push_back(static_cast<T>(v));
  std::vector<T> y(x.size(), T(-12345));
  ParallelFor serial = SerialFor;
  ScaledClampForward<T>(x.data(), y.data(), static_cast<int64_t>(x.size()), attrs, serial);

  int below = 0, inside = 0, above = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double ref = ReferenceForward(x[i], attrs.scale, attrs.min_val, attrs.max_val);
    const long double tol = testing::RelTol<T>() * std::max<long double>(1.0L, std::fabs(ref));
    EXPECT_NEAR(static_cast<double>(y[i]), static_cast<double>(ref), static_cast<double>(tol))
        << "x[" << i << "] = " << x[i];
    const long double v = static_cast<long double>(x[i]) * attrs.scale;
    if (v < attrs.min_val) {
      ++below;
      EXPECT_EQ(y[i], T(-1)) << "below the range must give min_val exactly, x = " << x[i];
    } else if (v > attrs.max_val) {
      ++above;
      EXPECT_EQ(y[i], T(2)) << "above the range must give max_val exactly, x = " << x[i];
    } else {
      ++inside;
    }
  }
  // The samples really do cover all three regions.
  EXPECT_GT(below, 0);
  EXPECT_GT(inside, 0);
  EXPECT_GT(above, 0);
}

TEST(ScaledClampKernel, ForwardFloatMatchesReference) { CheckForwardAgainstReference<float>(); }

TEST(ScaledClampKernel, ForwardDoubleMatchesReference) { CheckForwardAgainstReference<double>(); }

TEST(ScaledClampKernel, ForwardDefaultRangeIsScaledRelu6) {
  const ScaledClampAttrs attrs{2.0, 0.0, 6.0};
  const std::vector<double> x = {-5.0, -0.0, 0.25, 1.0, 2.9, 3.0, 3.1, 100.0};
  const std::vector<double> expected = {0.0, 0.0, 0.5, 2.0, 5.8, 6.0, 6.0, 6.0};
  std::vector<double> y(x.size());
  ParallelFor serial = SerialFor;
  ScaledClampForward<double>(x.data(), y.data(), static_cast<int64_t>(x.size()), attrs, serial);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-12) << "x = " << x[i];
}

template <typename T>
void CheckNanPropagates() {
  const ScaledClampAttrs attrs{1.5, -1.0, 2.0};
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> x = {T(0.5), nan, T(-10), nan, T(10)};
  std::vector<T> y(x.size(), T(0));
  ParallelFor serial = SerialFor;
  ScaledClampForward<T>(x.data(), y.data(), static_cast<int64_t>(x.size()), attrs, serial);
  EXPECT_NEAR(static_cast<double>(y[0]), 0.75, 1e-7);
  EXPECT_TRUE(std::isnan(y[1])) << "got " << y[1];
  EXPECT_EQ(y[2], T(-1));
  EXPECT_TRUE(std::isnan(y[3])) << "got " << y[3];
  EXPECT_EQ(y[4], T(2));
}

TEST(ScaledClampKernel, NanPropagatesFloat) { CheckNanPropagates<float>(); }

TEST(ScaledClampKernel, NanPropagatesDouble) { CheckNanPropagates<double>(); }

TEST(ScaledClampKernel, NanPropagatesEvenWithEmptyRange) {
  const ScaledClampAttrs attrs{1.0, 3.0, 1.0};
  const double x = std::numeric_limits<double>::quiet_NaN();
  double y = 0.0;
  ParallelFor serial = SerialFor;
  ScaledClampForward<double>(&x, &y, 1, attrs, serial);
  EXPECT_TRUE(std::isnan(y)) << "got " << y;
}

template <typename T>
void CheckMinAboveMaxGivesMax() {
  // torch.clamp(x, min=3, max=1) is 1 everywhere.
  const ScaledClampAttrs attrs{1.0, 3.0, 1.0};
  const std::vector<T> x = {T(-100), T(0), T(1), T(2), T(3), T(4), T(100)};
  std::vector<T> y(x.size(), T(-7));
  ParallelFor serial = SerialFor;
  ScaledClampForward<T>(x.data(), y.data(), static_cast<int64_t>(x.size()), attrs, serial);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], T(1)) << "x = " << x[i];
}

TEST(ScaledClampKernel, MinAboveMaxGivesMaxFloat) { CheckMinAboveMaxGivesMax<float>(); }

TEST(ScaledClampKernel, MinAboveMaxGivesMaxDouble) { CheckMinAboveMaxGivesMax<double>(); }

template <typename T>
void CheckBackward() {
  // scale 2, range [-1, 3]: x = -0.5 and x = 1.5 land exactly on the bounds.
  const ScaledClampAttrs attrs{2.0, -1.0, 3.0};
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T just_below_lo = std::nextafter(T(-0.5), T(-1));
  const T just_above_hi = std::nextafter(T(1.5), T(2));
  const std::vector<T> x = {T(-10), just_below_lo, T(-0.5), T(0), T(0.7), T(1.5), just_above_hi, T(10), nan};
  const std::vector<T> g = {T(1.25), T(-2), T(0.5), T(3), T(-1.5), T(0.75), T(4), T(5), T(6)};
  const std::vector<bool> passes = {false, false, true, true, true, true, false, false, false};
  std::vector<T> grad_x(x.size(), T(-999));
  ParallelFor serial = SerialFor;
  ScaledClampBackward<T>(g.data(), x.data(), grad_x.data(), static_cast<int64_t>(x.size()), attrs, serial);
  for (size_t i = 0; i < x.size(); ++i) {
    const T expected = passes[i] ? static_cast<T>(static_cast<long double>(g[i]) * attrs.scale) : T(0);
    EXPECT_EQ(grad_x[i], expected) << "x = " << x[i] << ", grad_y = " << g[i];
    EXPECT_FALSE(std::isnan(grad_x[i])) << "x = " << x[i];
  }
}

TEST(ScaledClampKernel, BackwardFloatInclusiveBoundsAndNan) { CheckBackward<float>(); }

TEST(ScaledClampKernel, BackwardDoubleInclusiveBoundsAndNan) { CheckBackward<double>(); }

TEST(ScaledClampKernel, BackwardMatchesReferenceOnSamples) {
  const ScaledClampAttrs attrs{1.5, -1.0, 2.0};
  const std::vector<double> x = SampleInputs();
  std::vector<double> g(x.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5 + 0.25 * static_cast<double>(i);
  std::vector<double> grad_x(x.size());
  ParallelFor serial = SerialFor;
  ScaledClampBackward<double>(g.data(), x.data(), grad_x.data(), static_cast<int64_t>(x.size()), attrs,
                              serial);
  for (size_t i = 0; i < x.size(); ++i) {
    const long double v = static_cast<long double>(x[i]) * attrs.scale;
    const long double expected = (v >= attrs.min_val && v <= attrs.max_val) ? g[i] * attrs.scale : 0.0L;
    EXPECT_NEAR(grad_x[i], static_cast<double>(expected), 1e-12) << "x = " << x[i];
  }
}

TEST(ScaledClampKernel, ZeroElementsDoesNothing) {
  const ScaledClampAttrs attrs{1.5, -1.0, 2.0};
  const std::vector<float> x = {5.0f, -5.0f};
  std::vector<float> y = {42.0f, 43.0f};
  int calls_with_work = 0;
  ParallelFor counting = [&](int64_t n, int64_t grain, const RangeBody& body) {
    if (n > 0) ++calls_with_work;
    SerialFor(n, grain, body);
  };
  ScaledClampForward<float>(x.data(), y.data(), 0, attrs, counting);
  EXPECT_EQ(y[0], 42.0f);
  EXPECT_EQ(y[1], 43.0f);
  std::vector<float> grad_x = {44.0f, 45.0f};
  ScaledClampBackward<float>(x.data(), x.data(), grad_x.data(), 0, attrs, counting);
  EXPECT_EQ(grad_x[0], 44.0f);
  EXPECT_EQ(grad_x[1], 45.0f);
  EXPECT_EQ(calls_with_work, 0);
  // Null pointers are fine when there is nothing to do.
  ScaledClampForward<double>(nullptr, nullptr, 0, attrs, counting);
  ScaledClampBackward<double>(nullptr, nullptr, nullptr, 0, attrs, counting);
}

TEST(ScaledClampKernel, ChunkedParallelForGivesSameResult) {
  const ScaledClampAttrs attrs{0.75, -2.0, 3.0};
  const int64_t n = 100003;  // Several grains of 2^15, the last one partial.
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i % 997) - 498) * 0.01f;
  std::vector<float> y_serial(x.size()), y_chunked(x.size(), -1.0f);
  ParallelFor serial = SerialFor;
  int chunks = 0;
  ParallelFor reverse_chunks = [&](int64_t count, int64_t grain, const RangeBody& body) {
    const int64_t step = grain > 0 ? grain : 1;
    for (int64_t begin = ((count - 1) / step) * step; begin >= 0; begin -= step) {
      body(begin, std::min(count, begin + step));
      ++chunks;
    }
  };
  ScaledClampForward<float>(x.data(), y_serial.data(), n, attrs, serial);
  ScaledClampForward<float>(x.data(), y_chunked.data(), n, attrs, reverse_chunks);
  EXPECT_GT(chunks, 1);
  EXPECT_EQ(y_serial, y_chunked);
}

TEST(ScaledClampInfer, RejectsInt32WithFullMessage) {
  std::vector<TensorInfo> outputs;
  const Status status = InferScaledClamp({TensorInfo{true, "int32", {2, 3}}}, &outputs);
  ASSERT_FALSE(status.ok());
  const std::string& message = status.message();
  EXPECT_NE(message.find("scaled_clamp"), std::string::npos) << message;
  EXPECT_NE(message.find("'x'"), std::string::npos) << message;
  EXPECT_NE(message.find("float32, float64, float16 or bfloat16"), std::string::npos) << message;
  EXPECT_NE(message.find("int32"), std::string::npos) << message;
}

TEST(ScaledClampInfer, AcceptsZeroDimShape) {
  std::vector<TensorInfo> outputs;
  const Status status = InferScaledClamp({TensorInfo{true, "float32", {}}}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_TRUE(outputs[0].present);
  EXPECT_EQ(outputs[0].dtype, "float32");
  EXPECT_EQ(outputs[0].shape, Shape{});
}

TEST(ScaledClampInfer, OutputMatchesInput) {
  std::vector<TensorInfo> outputs;
  const Status status = InferScaledClamp({TensorInfo{true, "float64", {-1, 4, 5}}}, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].dtype, "float64");
  EXPECT_EQ(outputs[0].shape, (Shape{-1, 4, 5}));
}

TEST(ScaledClampLaunch, RunsThroughKernelArgs) {
  const std::vector<float> x = {-4.0f, -0.5f, 0.0f, 0.5f, 1.0f, 10.0f};
  std::vector<float> y(x.size(), -99.0f);
  KernelArgs args;
  args.inputs = {x.data()};
  args.input_infos = {TensorInfo{true, "float32", {2, 3}}};
  args.outputs = {y.data()};
  args.output_infos = {TensorInfo{true, "float32", {2, 3}}};
  args.attrs = {2.0, -1.0, 1.5};
  args.parallel_for = SerialFor;
  const Status status = LaunchScaledClamp(args);
  ASSERT_TRUE(status.ok()) << status.message();
  const std::vector<float> expected = {-1.0f, -1.0f, 0.0f, 1.0f, 1.5f, 1.5f};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], expected[i]) << "x = " << x[i];
}

TEST(ScaledClampLaunch, ZeroDimDoubleThroughKernelArgs) {
  const double x = 0.8;
  double y = -99.0;
  KernelArgs args;
  args.inputs = {&x};
  args.input_infos = {TensorInfo{true, "float64", {}}};
  args.outputs = {&y};
  args.output_infos = {TensorInfo{true, "float64", {}}};
  args.attrs = {3.0, 0.0, 6.0};
  args.parallel_for = SerialFor;
  const Status status = LaunchScaledClamp(args);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_NEAR(y, 2.4, 1e-12);
}

TEST(ScaledClampLaunch, RejectsIntegerDtype) {
  const std::vector<int32_t> x = {1, 2};
  std::vector<int32_t> y = {7, 7};
  KernelArgs args;
  args.inputs = {x.data()};
  args.input_infos = {TensorInfo{true, "int32", {2}}};
  args.outputs = {y.data()};
  args.output_infos = {TensorInfo{true, "int32", {2}}};
  args.attrs = {1.0, 0.0, 6.0};
  args.parallel_for = SerialFor;
  const Status status = LaunchScaledClamp(args);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("int32"), std::string::npos) << status.message();
  EXPECT_EQ(y, (std::vector<int32_t>{7, 7}));
}

}  // namespace
}  // namespace opbridge

namespace opbridge {
namespace {

TEST(ScaledClampForward, NanBoundPropagatesLikeTorchClamp) {
  const std::vector<float> x = {-1.0f, 0.5f, 7.0f};
  for (const ScaledClampAttrs attrs :
       {ScaledClampAttrs{1.0, 0.0, std::nan("")}, ScaledClampAttrs{1.0, std::nan(""), 6.0}}) {
    std::vector<float> y(x.size(), 0.0f);
    ScaledClampForward<float>(x.data(), y.data(), static_cast<int64_t>(x.size()), attrs, SerialFor);
    for (float v : y) EXPECT_TRUE(std::isnan(v));
  }
}

}  // namespace
}  // namespace opbridge
