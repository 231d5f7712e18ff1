#include "pairwise_dot/spec.h"

#include "opbridge/checks.h"

namespace pairwise_dot_ops {

using opbridge::Dim;
using opbridge::Status;

// features is a float32 or float64 [B, F, D] tensor; y is [B, F * (F - 1) / 2]
// of its dtype. The output size is computed on Dims: symbolic under
// torch.compile and torch.export, unknown in a runtime's shape inference
// where F is.
Status InferPairwiseDot(const std::vector<opbridge::TensorInfo>& inputs,
                        std::vector<opbridge::TensorInfo>* outputs) {
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingInputs(kPairwiseDotSpec, inputs));
  const opbridge::TensorInfo& features = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckRank(kPairwiseDotSpec, "features", features.shape, 3, "[B, F, D]"));
  const Dim f = features.shape[1];
  *outputs = {opbridge::TensorInfo{true, features.dtype, {features.shape[0], f * (f - 1) / 2}}};
  return Status::Ok();
}

}  // namespace pairwise_dot_ops

OPBRIDGE_REGISTER_SPEC(pairwise_dot_ops::kPairwiseDotSpec)
