#include "ops/rms_norm/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// x has at least one dimension; weight and (when present) bias are
// [x.shape[-1]] of x's dtype; y has x's shape and dtype.
Status InferRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kRmsNormSpec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kRmsNormSpec, "x", x.shape));
  OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kRmsNormSpec, "weight", inputs[1].shape, x.shape));
  if (inputs[2].present) {
    OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kRmsNormSpec, "bias", inputs[2].shape, x.shape));
  }
  *outputs = {TensorInfo{true, x.dtype, x.shape}};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kRmsNormSpec)
