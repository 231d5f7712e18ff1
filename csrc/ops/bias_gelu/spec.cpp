#include "ops/bias_gelu/spec.h"

#include "opbridge/checks.h"

namespace opbridge {

// x has at least one dimension; bias is [x.shape[-1]] of x's dtype; y has
// x's shape and dtype.
Status InferBiasGelu(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(kBiasGeluSpec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(CheckAtLeast1d(kBiasGeluSpec, "x", x.shape));
  OPBRIDGE_RETURN_IF_ERROR(CheckVectorOfLastDim(kBiasGeluSpec, "bias", inputs[1].shape, x.shape));
  *outputs = {TensorInfo{true, x.dtype, x.shape}};
  return Status::Ok();
}

Status ParseGeluApproximate(const std::string& approximate, bool* use_tanh) {
  if (approximate == "none" || approximate == "tanh") {
    *use_tanh = approximate == "tanh";
    return Status::Ok();
  }
  return ArgError(kBiasGeluSpec, "approximate", "must be 'none' or 'tanh', got '" + approximate + "'");
}

Status InferBiasGeluAttrs(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                          std::vector<TensorInfo>* outputs) {
  bool use_tanh = false;
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(attrs.at(0).text, &use_tanh));
  return InferBiasGelu(inputs, outputs);
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kBiasGeluSpec)
