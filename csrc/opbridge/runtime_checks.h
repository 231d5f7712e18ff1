// Opt-in validation inside the adapters, switched on by OPBRIDGE_CHECK=1.
#pragma once

#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {

// Whether OPBRIDGE_CHECK=1 was set when the library was loaded. Read once,
// so the default path costs one predictable branch per call.
bool RuntimeChecksEnabled();

// Checks what a kernel is about to receive: every present input and every
// output has a buffer of its shape (non-null unless empty, no negative
// dimension), there are as many outputs as the spec has, and no float32 or
// float64 input holds NaN or Inf. The message names the op, the argument and
// the first offending element.
Status ValidateKernelArgs(const OpSpec& spec, const KernelArgs& args);

}  // namespace opbridge
