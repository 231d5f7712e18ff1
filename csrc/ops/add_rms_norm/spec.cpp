#include "ops/add_rms_norm/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// x has at least one dimension; residual has x's shape; weight and (when
// present) bias are [x.shape[-1]]; all of x's dtype. Both outputs have x's
// shape and dtype.
Status InferAddRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kAddRmsNormSpec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kAddRmsNormSpec, "x", x.shape));
  OPBRIDGE_RETURN_IF_ERROR(CheckSameShape(kAddRmsNormSpec, "residual", inputs[1].shape, x.shape, "x"));
  OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kAddRmsNormSpec, "weight", inputs[2].shape, x.shape));
  if (inputs[3].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kAddRmsNormSpec, "bias", inputs[3].shape, x.shape));
  }
  *outputs = {TensorInfo{true, x.dtype, x.shape}, TensorInfo{true, x.dtype, x.shape}};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kAddRmsNormSpec)
