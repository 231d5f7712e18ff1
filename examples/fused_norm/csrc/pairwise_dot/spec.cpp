#include "pairwise_dot/spec.h"

#include "opbridge/checks.h"

namespace myops {

// features: float32, float64, float16 or bfloat16 [B, F, D]; y: [B, F * (F -
// 1) / 2] of its dtype, the size computed on Dims (symbolic under
// torch.compile and torch.export, unknown in a runtime's shape inference
// where F is).
opbridge::Status InferPairwiseDot(const std::vector<opbridge::TensorInfo>& inputs,
                                  std::vector<opbridge::TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kPairwiseDotSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingOrHalfInputs(spec, inputs));
  const opbridge::TensorInfo& features = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckRank(spec, "features", features.shape, 3, "[B, F, D]"));
  const opbridge::Dim f = features.shape[1];
  *outputs = {opbridge::TensorInfo{true, features.dtype, {features.shape[0], f * (f - 1) / 2}}};
  return opbridge::Status::Ok();
}

}  // namespace myops

OPBRIDGE_REGISTER_SPEC(myops::kPairwiseDotSpec)
