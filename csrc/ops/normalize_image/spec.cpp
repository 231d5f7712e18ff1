#include "ops/normalize_image/spec.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "opbridge/checks.h"

namespace opbridge {

namespace {

const char* Layout(bool channels_last) { return channels_last ? "[N, H, W, C]" : "[N, C, H, W]"; }

Status CheckPerChannel(const char* argument, const std::vector<double>& values, int64_t channels,
                       const Shape& shape, bool channels_last) {
  if (values.empty() || (channels >= 0 && static_cast<int64_t>(values.size()) != channels)) {
    return ArgError(kNormalizeImageSpec, argument,
                    "must have one value per channel (" + (channels < 0 ? "?" : std::to_string(channels)) +
                        ", dimension " + (channels_last ? "3" : "1") + " of image " + FormatShape(shape) +
                        " read as " + Layout(channels_last) + "), got " + std::to_string(values.size()) +
                        " values");
  }
  return Status::Ok();
}

}  // namespace

// image is uint8, float32, float64, float16 or bfloat16. Without the attributes the layout is
// unknown: this rule (used only where they are not at hand) checks the dtype
// and gives the output dtype; InferNormalizeImageAttrs checks the rest.
Status InferNormalizeImage(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  const OpSpec& spec = kNormalizeImageSpec;
  OPBRIDGE_RETURN_IF_ERROR(CheckInputCount(spec, inputs));
  const TensorInfo& image = inputs[0];
  if (image.dtype != "uint8" && image.dtype != "float32" && image.dtype != "float64" &&
      image.dtype != "float16" && image.dtype != "bfloat16") {
    return ArgError(spec, "image",
                    "must be uint8, float32, float64, float16 or bfloat16, got " + image.dtype);
  }
  const std::string out_dtype = image.dtype == "uint8" ? "float32" : image.dtype;
  const Dim batch = image.shape.size() == 4 ? image.shape[0] : Dim(-1);
  *outputs = {TensorInfo{true, out_dtype, {batch, -1, -1, -1}}};
  return Status::Ok();
}

// image is 4-D; mean and std hold one value per channel, std has no zero; y
// is [N, C, H, W].
Status InferNormalizeImageAttrs(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(InferNormalizeImage(inputs, outputs));
  OPBRIDGE_RETURN_IF_ERROR(
      CheckRank(kNormalizeImageSpec, "image", inputs[0].shape, 4, "[N, H, W, C] or [N, C, H, W]"));
  const Shape& x = inputs[0].shape;
  const bool channels_last = attrs.at(2).number != 0.0;
  const int64_t channels = channels_last ? x[3] : x[1];
  OPBRIDGE_RETURN_IF_ERROR(CheckPerChannel("mean", attrs.at(0).numbers, channels, x, channels_last));
  OPBRIDGE_RETURN_IF_ERROR(CheckPerChannel("std", attrs.at(1).numbers, channels, x, channels_last));
  const std::vector<double>& std_values = attrs[1].numbers;
  for (size_t c = 0; c < std_values.size(); ++c) {
    if (std_values[c] == 0.0 || !std::isfinite(std_values[c])) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g", std_values[c]);
      return ArgError(kNormalizeImageSpec, "std",
                      "must be finite and non-zero for every channel, got " + std::string(value) +
                          " for channel " + std::to_string(c));
    }
  }
  (*outputs)[0].shape = channels_last ? Shape{x[0], x[3], x[1], x[2]} : x;
  return Status::Ok();
}

// grad_y is a float [N, C, H, W] tensor with one channel per std value;
// grad_image has the image's layout.
Status InferNormalizeImageBackward(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                   std::vector<TensorInfo>* outputs) {
  const OpSpec& spec = kNormalizeImageSpec;
  const TensorInfo& grad = inputs.at(0);
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfDtype(spec, "grad_y", grad.dtype));
  OPBRIDGE_RETURN_IF_ERROR(CheckRank(spec, "grad_y", grad.shape, 4, "[N, C, H, W]"));
  const Shape& g = grad.shape;
  const size_t channels = attrs.at(1).numbers.size();
  if (g[1] >= 0 && g[1] != static_cast<int64_t>(channels)) {
    return ArgError(spec, "grad_y",
                    "must have " + std::to_string(channels) + " channels (one per std value), got shape " +
                        FormatShape(g));
  }
  const bool channels_last = attrs.at(2).number != 0.0;
  *outputs = {TensorInfo{true, grad.dtype, channels_last ? Shape{g[0], g[2], g[3], g[1]} : g}};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kNormalizeImageSpec)
