#include "ops/rotary_embedding/spec.h"

#include <string>

#include "opbridge/checks.h"

namespace opbridge {

// x is [batch, seq, heads, head_dim] with an even head_dim; cos and sin are
// both [seq, half] with 1 <= half <= head_dim / 2 (rotary_dim = 2 * half;
// narrower than head_dim is partial rotary); all of x's dtype. y has x's
// shape and dtype.
Status InferRotaryEmbedding(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  const OpSpec& spec = kRotaryEmbeddingSpec;
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingInputs(spec, inputs));
  const Shape& x = inputs[0].shape;
  const Shape& cos = inputs[1].shape;
  OPBRIDGE_RETURN_IF_ERROR(CheckRank(spec, "x", x, 4, "[batch, seq, heads, head_dim]"));
  const int64_t head_dim = x[3];
  if (head_dim >= 0 && head_dim % 2 != 0) {
    return ArgError(spec, "x", "must have an even head_dim (last dimension), got shape " + FormatShape(x));
  }
  OPBRIDGE_RETURN_IF_ERROR(CheckRank(spec, "cos", cos, 2, "[seq, rotary_dim / 2]"));
  if (DimsDiffer(cos[0], x[1])) {
    return ArgError(spec, "cos",
                    "must have seq = " + std::to_string(x[1]) + " rows (dimension 1 of x " + FormatShape(x) +
                        "), got shape " + FormatShape(cos));
  }
  if (cos[1] == 0 || (cos[1] > 0 && head_dim >= 0 && 2 * cos[1] > head_dim)) {
    return ArgError(spec, "cos",
                    "must have between 1 and head_dim / 2 = " + std::to_string(head_dim / 2) +
                        " columns (rotary_dim / 2), got shape " + FormatShape(cos));
  }
  OPBRIDGE_RETURN_IF_ERROR(CheckSameShape(spec, "sin", inputs[2].shape, cos, "cos"));
  *outputs = {TensorInfo{true, inputs[0].dtype, x}};
  return Status::Ok();
}

}  // namespace opbridge

OPBRIDGE_REGISTER_SPEC(opbridge::kRotaryEmbeddingSpec)
