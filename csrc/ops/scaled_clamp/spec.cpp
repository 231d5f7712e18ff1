#include "ops/scaled_clamp/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// Elementwise: any shape (0-d included) of float32, float64, float16 or bfloat16.
Status InferScaledClamp(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kScaledClampSpec, inputs));
  *outputs = {TensorInfo{true, inputs[0].dtype, inputs[0].shape}};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kScaledClampSpec)
