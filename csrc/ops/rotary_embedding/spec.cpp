#include "ops/rotary_embedding/spec.h"

#include <string>

#include "opbridge/checks.h"

namespace opbridge {

// x is [batch, seq, heads, head_dim] with an even head_dim; cos and sin are
// both [seq, half] (one table for the whole batch) or both [batch, seq, half]
// (one table per batch row, e.g. from per-row position ids; a batch of 1
// broadcasts), with 1 <= half <= head_dim / 2 (rotary_dim = 2 * half;
// narrower than head_dim is partial rotary); all of x's dtype. y has x's
// shape and dtype. Unknown dims (negative) match anything.
Status InferRotaryEmbedding(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  const OpSpec& spec = kRotaryEmbeddingSpec;
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfInputs(spec, inputs));
  const Shape& x = inputs[0].shape;
  const Shape& cos = inputs[1].shape;
  OPBRIDGE_RETURN_IF_ERROR(CheckRank(spec, "x", x, 4, "[batch, seq, heads, head_dim]"));
  const Dim head_dim = x[3];
  if (head_dim >= 0 && head_dim % 2 != 0) {
    return ArgError(spec, "x", "must have an even head_dim (last dimension), got shape " + FormatShape(x));
  }
  if (cos.size() != 2 && cos.size() != 3) {
    return ArgError(spec, "cos",
                    "must be 2-D [seq, rotary_dim / 2] or 3-D [batch, seq, rotary_dim / 2], got " +
                        std::to_string(cos.size()) + "-D shape " + FormatShape(cos));
  }
  const bool per_batch = cos.size() == 3;
  const Dim cos_batch = per_batch ? cos[0] : Dim(1);
  const Dim cos_seq = cos[cos.size() - 2];
  const Dim cos_half = cos[cos.size() - 1];
  if (per_batch && cos_batch != 1 && DimsDiffer(cos_batch, x[0])) {
    return ArgError(spec, "cos",
                    "must have batch = " + std::to_string(x[0]) + " (dimension 0 of x " + FormatShape(x) +
                        ") or 1 when 3-D [batch, seq, rotary_dim / 2], got shape " + FormatShape(cos));
  }
  if (DimsDiffer(cos_seq, x[1])) {
    return ArgError(spec, "cos",
                    "must have seq = " + std::to_string(x[1]) + " rows (dimension 1 of x " + FormatShape(x) +
                        "), got shape " + FormatShape(cos));
  }
  if (cos_half == 0 || (cos_half > 0 && head_dim >= 0 && 2 * cos_half > head_dim)) {
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
