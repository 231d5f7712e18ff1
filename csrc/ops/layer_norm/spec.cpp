#include "ops/layer_norm/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// x has at least one dimension; weight and bias (each optional) are
// [x.shape[-1]] of x's dtype; y has x's shape and dtype.
Status InferLayerNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kLayerNormSpec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kLayerNormSpec, "x", x.shape));
  if (inputs[1].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kLayerNormSpec, "weight", inputs[1].shape, x.shape));
  }
  if (inputs[2].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kLayerNormSpec, "bias", inputs[2].shape, x.shape));
  }
  *outputs = {TensorInfo{true, x.dtype, x.shape}};
  return Status::Ok();
}

// Backward inputs: grad_y, x, weight (optional). grad_x has x's shape;
// grad_weight and grad_bias are [x.shape[-1]]; all of x's dtype.
Status InferLayerNormBackward(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& /*attrs*/,
                              std::vector<TensorInfo>* outputs) {
  const TensorInfo& x = inputs[1];
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfDtype(kLayerNormSpec, "x", x.dtype));
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kLayerNormSpec, "x", x.shape));
  if (inputs[2].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckSameDtype(kLayerNormSpec, "weight", inputs[2].dtype, x.dtype));
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kLayerNormSpec, "weight", inputs[2].shape, x.shape));
  }
  const TensorInfo vector{true, x.dtype, Shape{x.shape.back()}};
  *outputs = {TensorInfo{true, x.dtype, x.shape}, vector, vector};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kLayerNormSpec)
