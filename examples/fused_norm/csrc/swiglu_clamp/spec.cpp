#include "swiglu_clamp/spec.h"

#include "opbridge/checks.h"

namespace myops {

// gate and up have the same shape (any, 0-d included) and dtype (float32,
// float64, float16 or bfloat16); y has their shape and dtype.
opbridge::Status InferSwigluClamp(const std::vector<opbridge::TensorInfo>& inputs,
                                  std::vector<opbridge::TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kSwigluClampSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingOrHalfInputs(spec, inputs));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckSameShape(spec, "up", inputs[1].shape, inputs[0].shape, "gate"));
  *outputs = {inputs[0]};
  return opbridge::Status::Ok();
}

}  // namespace myops

OPBRIDGE_REGISTER_SPEC(myops::kSwigluClampSpec)
