#include "softmax_lse/spec.h"

#include <cmath>
#include <string>

#include "opbridge/checks.h"

namespace myops {

// x has at least one dimension, of float32, float64, float16 or bfloat16; y
// has x's shape and dtype, lse x's shape without its last dimension.
opbridge::Status InferSoftmaxLse(const std::vector<opbridge::TensorInfo>& inputs,
                                 std::vector<opbridge::TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kSoftmaxLseSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingOrHalfInputs(spec, inputs));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckAtLeast1d(spec, "x", inputs[0].shape));
  opbridge::TensorInfo lse = inputs[0];
  lse.shape.pop_back();
  *outputs = {inputs[0], lse};
  return opbridge::Status::Ok();
}

opbridge::Status CheckTemperature(double temperature) {
  if (!(temperature > 0.0) || std::isinf(temperature)) {
    return opbridge::ArgError(kSoftmaxLseSpec, "temperature",
                              "must be positive and finite, got " + std::to_string(temperature));
  }
  return opbridge::Status::Ok();
}

// The shape rule refuses a temperature the kernel would refuse, before any
// kernel runs: in every runtime, and at export.
opbridge::Status InferSoftmaxLseAttrs(const std::vector<opbridge::TensorInfo>& inputs,
                                      const std::vector<opbridge::AttrValue>& attrs,
                                      std::vector<opbridge::TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckTemperature(attrs.at(0).number));
  return InferSoftmaxLse(inputs, outputs);
}

}  // namespace myops

OPBRIDGE_REGISTER_SPEC(myops::kSoftmaxLseSpec)
