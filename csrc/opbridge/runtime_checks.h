// Opt-in validation inside the adapters, switched on by OPBRIDGE_CHECK=1.
#pragma once

#include <string>

#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {

// Whether OPBRIDGE_CHECK=1 was set when the library was loaded. Read once,
// so the default path costs one predictable branch per call.
bool RuntimeChecksEnabled();

// Checks one tensor argument: a buffer of its shape (non-null unless empty,
// no negative dimension) and, for float32, float64, float16 and bfloat16,
// no NaN or Inf. Other dtypes (uint8, ...) are only checked for the buffer.
// The message names the op, the argument and the first offending element.
// Framework-free, for any argument a kernel receives: the forward's inputs
// (through ValidateKernelArgs) and a backward's arguments (grad_y, saved
// tensors), which an adapter checks one by one.
Status CheckFiniteTensor(const OpSpec& spec, const char* argument, const TensorInfo& info, const void* data);

// Checks one attribute value: no NaN in a float attribute or in any element
// of a float list (an infinite value passes: an infinite clamp bound is
// meaningful). Int, bool and string attributes always pass. `argument` is
// the attribute's name, as in the spec or the backward's schema.
Status CheckAttributeValue(const OpSpec& spec, const char* argument, const AttrValue& value);

// Checks what a kernel is about to receive: there are as many outputs as the
// spec has, every present input passes CheckFiniteTensor, every attribute
// (in spec order) passes CheckAttributeValue, and every output has a buffer
// of its shape.
Status ValidateKernelArgs(const OpSpec& spec, const KernelArgs& args);

// A string of the user's (a node name, an attribute's text) in single quotes,
// safe inside a message: a quote or backslash is escaped with a backslash and
// every byte outside printable ASCII is written \xNN, so that no byte of it
// (a NUL above all, which a C API would end the message at) can cut or garble
// the message around it.
std::string QuotedForMessage(const std::string& text);

// `message` with every control byte (below 0x20, and 0x7F) written \xNN: a
// last guard for a message that embeds user text unescaped before it goes
// through a C string.
std::string WithoutControlBytes(const std::string& message);

}  // namespace opbridge
