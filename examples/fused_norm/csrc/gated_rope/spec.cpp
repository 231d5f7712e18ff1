#include "gated_rope/spec.h"

#include <cmath>
#include <string>

#include "opbridge/checks.h"

namespace myops {

// x: [B, S, H, D], float32, float64, float16 or bfloat16, D even;
// positions: int64 or int32 [B, S]; gate: x's dtype, [H]. y: x's shape and dtype.
opbridge::Status InferGatedRope(const std::vector<opbridge::TensorInfo>& inputs,
                                std::vector<opbridge::TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kGatedRopeSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckInputCount(spec, inputs));
  const opbridge::TensorInfo& x = inputs[0];
  const opbridge::TensorInfo& positions = inputs[1];
  const opbridge::TensorInfo& gate = inputs[2];
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingOrHalfDtype(spec, "x", x.dtype));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckRank(spec, "x", x.shape, 4, "[batch, seq, heads, head_dim]"));
  const opbridge::Dim head_dim = x.shape[3];
  if (head_dim >= 0 && head_dim % 2 != 0) {
    return opbridge::ArgError(
        spec, "x",
        "must have an even head_dim (pairs i, i + D/2), got shape " + opbridge::FormatShape(x.shape));
  }
  if (positions.dtype != "int64" && positions.dtype != "int32") {
    return opbridge::ArgError(spec, "positions", "must be int64 or int32, got " + positions.dtype);
  }
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckSameShape(spec, "positions", positions.shape,
                                                    {x.shape[0], x.shape[1]}, "x's [batch, seq]"));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckSameDtype(spec, "gate", gate.dtype, x.dtype));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckSameShape(spec, "gate", gate.shape, {x.shape[2]}, "x's [heads]"));
  *outputs = {x};
  return opbridge::Status::Ok();
}

}  // namespace myops

OPBRIDGE_REGISTER_SPEC(myops::kGatedRopeSpec)
