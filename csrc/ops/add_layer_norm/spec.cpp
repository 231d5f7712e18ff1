#include "ops/add_layer_norm/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// x has at least one dimension; residual has x's shape; weight and bias
// (each optional) are [x.shape[-1]]; all of x's dtype. Both outputs have x's
// shape and dtype.
Status InferAddLayerNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kAddLayerNormSpec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kAddLayerNormSpec, "x", x.shape));
  OPBRIDGE_RETURN_IF_ERROR(CheckSameShape(kAddLayerNormSpec, "residual", inputs[1].shape, x.shape, "x"));
  if (inputs[2].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kAddLayerNormSpec, "weight", inputs[2].shape, x.shape));
  }
  if (inputs[3].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kAddLayerNormSpec, "bias", inputs[3].shape, x.shape));
  }
  *outputs = {TensorInfo{true, x.dtype, x.shape}, TensorInfo{true, x.dtype, x.shape}};
  return Status::Ok();
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight
// (optional). grad_sum has residual_out's shape; grad_weight and grad_bias
// are [residual_out.shape[-1]]; all of its dtype.
Status InferAddLayerNormBackward(const std::vector<TensorInfo>& inputs,
                                 const std::vector<AttrValue>& /*attrs*/, std::vector<TensorInfo>* outputs) {
  const TensorInfo& sum = inputs[2];
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfDtype(kAddLayerNormSpec, "residual_out", sum.dtype));
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kAddLayerNormSpec, "residual_out", sum.shape));
  if (inputs[3].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckSameDtype(kAddLayerNormSpec, "weight", inputs[3].dtype, sum.dtype));
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kAddLayerNormSpec, "weight", inputs[3].shape, sum.shape));
  }
  const TensorInfo vector{true, sum.dtype, Shape{sum.shape.back()}};
  *outputs = {TensorInfo{true, sum.dtype, sum.shape}, vector, vector};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kAddLayerNormSpec)
