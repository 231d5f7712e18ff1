#include "opbridge/runtime_checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "opbridge/half.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

const OpSpec& Spec(const char* name) { return *FindSpec(name); }

TEST(RuntimeChecks, FiniteTensorFindsNaNAndInfInEveryFloatDtype) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<float> f32 = {1.0f, 2.0f, static_cast<float>(nan)};
  const std::vector<double> f64 = {1.0, -inf, 3.0};
  const std::vector<Float16> f16 = {ToFloat16(1.0f), ToFloat16(2.0f), ToFloat16(3.0f), ToFloat16(NAN)};
  const std::vector<BFloat16> bf16 = {ToBFloat16(1.0f), ToBFloat16(INFINITY)};
  const OpSpec& spec = Spec("rms_norm");

  Status s = CheckFiniteTensor(spec, "grad_y", Info("float32", {3}), f32.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'grad_y' contains NaN at flat index 2 of float32 shape [3]"))
      << s.message();
  s = CheckFiniteTensor(spec, "x", Info("float64", {1, 3}), f64.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'x' contains -Inf at flat index 1")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "it takes finite values (OPBRIDGE_CHECK")) << s.message();
  s = CheckFiniteTensor(spec, "x", Info("float16", {2, 2}), f16.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "contains NaN at flat index 3 of float16 shape [2, 2]")) << s.message();
  s = CheckFiniteTensor(spec, "x", Info("bfloat16", {2}), bf16.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "contains Inf at flat index 1 of bfloat16")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "opbridge::rms_norm (ONNX opbridge::RmsNorm)")) << s.message();
}

TEST(RuntimeChecks, FiniteTensorPassesFiniteHalfValuesAndOtherDtypes) {
  // The largest finite float16 (65504) and the smallest subnormal are finite.
  const std::vector<Float16> f16 = {Float16{0x7BFF}, Float16{0x0001}, Float16{0xFBFF}};
  EXPECT_TRUE(CheckFiniteTensor(Spec("scaled_clamp"), "x", Info("float16", {3}), f16.data()).ok());
  const std::vector<uint8_t> image = {0, 255, 128};
  EXPECT_TRUE(CheckFiniteTensor(Spec("normalize_image"), "image", Info("uint8", {3}), image.data()).ok());
  EXPECT_TRUE(CheckFiniteTensor(Spec("scaled_clamp"), "x", Info("float32", {0, 4}), nullptr).ok());
}

// A spec's value domains: a mask that takes -inf, a logsumexp output (saved
// for the backward) that takes -inf and +inf, and NaN where declared.
TEST(RuntimeChecks, FiniteTensorHonoursTheSpecsValueDomains) {
  const double inf = std::numeric_limits<double>::infinity();
  const OpSpec spec =
      OpSpec::Builder("masked_lse", "MaskedLse")
          .Inputs({Input("x"), Input("mask")})
          .Outputs({"y", "lse"})
          .BackwardInputs({GradOfOutput("grad_y", 0), SavedOutput("saved_lse", 1), SavedInput("x", 0)})
          .Values("mask", kNegInfValues)
          .Values("lse", kInfValues)
          .Values("x", kNaNValues);
  EXPECT_EQ(spec.AllowedValues("mask"), kNegInfValues);
  EXPECT_EQ(spec.AllowedValues("saved_lse"), kInfValues);
  EXPECT_EQ(spec.AllowedValues("grad_y"), kFiniteValues);
  const std::vector<float> mask = {0.0f, static_cast<float>(-inf)};
  EXPECT_TRUE(CheckFiniteTensor(spec, "mask", Info("float32", {2}), mask.data()).ok());
  const std::vector<float> up = {static_cast<float>(inf)};
  Status s = CheckFiniteTensor(spec, "mask", Info("float32", {1}), up.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(),
                       "argument 'mask' contains Inf at flat index 0 of float32 shape [1]; it takes "
                       "finite values, -inf (OPBRIDGE_CHECK"))
      << s.message();
  const std::vector<double> lse = {-inf, inf, 1.0};
  EXPECT_TRUE(CheckFiniteTensor(spec, "saved_lse", Info("float64", {3}), lse.data()).ok());
  EXPECT_FALSE(CheckFiniteTensor(spec, "grad_y", Info("float64", {3}), lse.data()).ok());
  const std::vector<Float16> x = {ToFloat16(NAN), ToFloat16(1.0f)};
  EXPECT_TRUE(CheckFiniteTensor(spec, "x", Info("float16", {2}), x.data()).ok());
  s = CheckFiniteTensor(spec, "y", Info("float16", {2}), x.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "a spec declares more with .Values(\"y\", ...)")) << s.message();
}

TEST(RuntimeChecks, FiniteTensorChecksTheBuffer) {
  Status s = CheckFiniteTensor(Spec("scaled_clamp"), "grad_y", Info("float32", {2}), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'grad_y' has no data for shape [2]")) << s.message();
}

TEST(RuntimeChecks, AttributeValuesRejectNaNAndAcceptInfinity) {
  const OpSpec& image = Spec("normalize_image");
  Status s = CheckAttributeValue(image, "mean", AttrValue(std::vector<double>{0.5, NAN, 0.5}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'mean' has NaN at index 1 of 3 values")) << s.message();
  s = CheckAttributeValue(Spec("rms_norm"), "eps", AttrValue(std::nan("")));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'eps' is NaN")) << s.message();
  EXPECT_TRUE(CheckAttributeValue(Spec("scaled_clamp"), "min_val", AttrValue(-INFINITY)).ok());
  EXPECT_TRUE(CheckAttributeValue(Spec("bias_gelu"), "approximate", AttrValue(std::string("tanh"))).ok());
}

TEST(RuntimeChecks, KernelArgsCoverHalfInputsAndAttributes) {
  const OpSpec& spec = Spec("scaled_clamp");
  std::vector<Float16> x = {ToFloat16(1.0f), ToFloat16(NAN)};
  std::vector<Float16> y(2);
  KernelArgs args;
  args.inputs = {x.data()};
  args.input_infos = {Info("float16", {2})};
  args.outputs = {y.data()};
  args.output_infos = {Info("float16", {2})};
  args.attrs = {AttrValue(1.0), AttrValue(0.0), AttrValue(6.0)};
  Status s = ValidateKernelArgs(spec, args);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'x' contains NaN at flat index 1 of float16")) << s.message();

  x[1] = ToFloat16(2.0f);
  EXPECT_TRUE(ValidateKernelArgs(spec, args).ok());
  args.attrs[2] = AttrValue(std::nan(""));
  s = ValidateKernelArgs(spec, args);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "argument 'max_val' is NaN")) << s.message();
}

}  // namespace
}  // namespace opbridge
