// The shapes and dtypes of a spec's backward outputs, with no torch types:
// what the backward kernels allocate and what the fake (Meta) kernels report.
#pragma once

#include <vector>

#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge::torch_adapter {

// Checks each gradient against the tensor it must match (BackwardInput::like),
// then applies the spec's rule: an output with `like` gets that input's info,
// the others come from BackwardSpec::infer. Negative (symbolic) dimensions
// pass through and never differ from a known one.
Status InferBackwardWithAttrs(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                              const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs);

}  // namespace opbridge::torch_adapter
