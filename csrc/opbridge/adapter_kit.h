// What every runtime adapter (PyTorch, its stable ABI, ONNX Runtime, OpenVINO,
// ExecuTorch) takes from the spec the same way, so that an adapter is only its
// runtime's glue: the dtype table (opbridge/dtype.h), shapes in messages
// (FormatShape, opbridge/checks.h), the opt-in checks (opbridge/runtime_checks.h),
// and here the spec's input names and, for the runtimes that read ONNX nodes,
// the ONNX attribute types and defaults.
#pragma once

#include <string>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/dtype.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/spec.h"

namespace opbridge {

// The names of the forward's inputs, in spec order (for the output guards'
// and the device checks' messages).
std::vector<const char*> ForwardInputNames(const OpSpec& spec);

// The names of the backward's inputs (grad_y, saved tensors), in spec order.
std::vector<const char*> BackwardInputNames(const OpSpec& spec);

// "x, weight, bias?": the spec's inputs, for messages.
std::string InputList(const OpSpec& spec);

// The ONNX attribute type an attribute of `type` has on a node: "FLOAT",
// "INT" (int and bool), "STRING" or "FLOATS".
const char* OnnxAttributeType(AttrType type);

// The spec's default of an attribute, as an ONNX node would hold it: a float
// default rounded to float32, like every ONNX FLOAT attribute (and like the
// default the custom route's ONNX schema declares).
AttrValue OnnxDefaultValue(const AttrSpec& attr);

// OnnxDefaultValue of every attribute, in spec order.
std::vector<AttrValue> OnnxDefaultValues(const OpSpec& spec);

}  // namespace opbridge
