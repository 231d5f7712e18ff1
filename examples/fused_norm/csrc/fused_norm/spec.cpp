#include "fused_norm/spec.h"

#include "opbridge/checks.h"

namespace myops {

// x has at least one dimension; weight and bias are [x.shape[-1]] of x's
// dtype (float32 or float64); y has x's shape and dtype.
opbridge::Status InferFusedNorm(const std::vector<opbridge::TensorInfo>& inputs,
                                std::vector<opbridge::TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kFusedNormSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingInputs(spec, inputs));
  const opbridge::TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckAtLeast1d(spec, "x", x.shape));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckVectorOfLastDim(spec, "weight", inputs[1].shape, x.shape));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckVectorOfLastDim(spec, "bias", inputs[2].shape, x.shape));
  *outputs = {x};
  return opbridge::Status::Ok();
}

}  // namespace myops

OPBRIDGE_REGISTER_SPEC(myops::kFusedNormSpec)
