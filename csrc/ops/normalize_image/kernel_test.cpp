#include "ops/normalize_image/kernel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/normalize_image/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

TEST(NormalizeImageKernel, Uint8NhwcToFloatNchw) {
  const ImageDims d{2, 3, 4, 5};
  std::vector<uint8_t> image(static_cast<size_t>(d.n * d.h * d.w * d.c));
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>((i * 37) % 256);
  const NormalizeImageAttrs attrs{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, true};
  std::vector<float> y(image.size());
  NormalizeImageForward<uint8_t, float>(image.data(), y.data(), d, attrs, testing::ReverseChunkedFor(1));
  std::vector<double> want(image.size());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t h = 0; h < d.h; ++h)
      for (int64_t w = 0; w < d.w; ++w)
        for (int64_t c = 0; c < d.c; ++c) {
          const double v = image[static_cast<size_t>(((n * d.h + h) * d.w + w) * d.c + c)];
          want[static_cast<size_t>(((n * d.c + c) * d.h + h) * d.w + w)] =
              (v / 255.0 - attrs.mean[static_cast<size_t>(c)]) / attrs.std[static_cast<size_t>(c)];
        }
  testing::ExpectNear(y, want, 1e-6, "NHWC uint8");
}

TEST(NormalizeImageKernel, NchwInputAndBackward) {
  const ImageDims d{1, 2, 3, 4};
  const auto x = testing::Random<double>(d.n * d.c * d.h * d.w, 1, 0.0, 255.0);
  const NormalizeImageAttrs attrs{{0.5, 0.25}, {0.5, 2.0}, false};
  std::vector<double> y(x.size()), gx(x.size());
  NormalizeImageForward<double, double>(x.data(), y.data(), d, attrs, SerialFor);
  std::vector<double> want(x.size()), want_grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / static_cast<size_t>(d.h * d.w)) % static_cast<size_t>(d.c);
    want[i] = (x[i] / 255.0 - attrs.mean[c]) / attrs.std[c];
    want_grad[i] = 1.0 / (255.0 * attrs.std[c]);
  }
  testing::ExpectNear(y, want, 1e-14, "NCHW double");
  const std::vector<double> ones(x.size(), 1.0);
  NormalizeImageBackward<double>(ones.data(), gx.data(), d, attrs, SerialFor);
  testing::ExpectNear(gx, want_grad, 1e-15, "backward");
}

TEST(NormalizeImageInfer, OutputIsNchwAndAttributesAreChecked) {
  std::vector<TensorInfo> outputs;
  const std::vector<AttrValue> attrs = {AttrValue(std::vector<double>{0.5, 0.5, 0.5}),
                                        AttrValue(std::vector<double>{0.5, 0.5, 0.5}), AttrValue(1.0)};
  Status status = InferNormalizeImageAttrs({Info("uint8", {2, 8, 6, 3})}, attrs, &outputs);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(outputs[0].dtype, "float32");
  EXPECT_EQ(outputs[0].shape, (Shape{2, 3, 8, 6}));

  status = InferNormalizeImageAttrs({Info("uint8", {2, 8, 6, 4})}, attrs, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'mean' must have one value per channel (4"))
      << status.message();

  const std::vector<AttrValue> zero_std = {AttrValue(std::vector<double>{0.5}),
                                           AttrValue(std::vector<double>{0.0}), AttrValue(0.0)};
  status = InferNormalizeImageAttrs({Info("float32", {2, 1, 6, 4})}, zero_std, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'std' must be finite and non-zero")) << status.message();

  status = InferNormalizeImage({Info("int32", {2, 8, 6, 3})}, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(),
                       "argument 'image' must be uint8, float32, float64, float16 or bfloat16, got int32"));
  status = InferNormalizeImageAttrs({Info("uint8", {8, 6, 3})}, attrs, &outputs);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "argument 'image' must be 4-D")) << status.message();
}

}  // namespace
}  // namespace opbridge
