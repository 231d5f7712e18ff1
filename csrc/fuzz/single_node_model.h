// The fuzz drivers' shared part: one node of an opbridge operator in an ONNX
// model, read structurally from the fuzz bytes (FuzzedDataProvider), and the
// invariant a run that succeeds must keep. Each driver (ONNX Runtime,
// OpenVINO) loads the model's bytes in its runtime and feeds the inputs;
// the bytes mean the same to both, so one corpus seeds either.
//
// What is drawn: which operator (from the library's own spec registry), its
// domain and op type, how many inputs (right and wrong arity), each input's
// dtype, rank, dims and how the graph declares it (static, symbolic, unknown
// rank, an initializer, a name shared with another input), the attributes
// (right names and wrong ones, of every ONNX attribute type but
// GRAPH/GRAPHS, with NaN, inf and huge values), the node name (arbitrary
// bytes) and the input data. A small protobuf writer serialises the
// ModelProto.
//
// Kept out by construction: GRAPH or GRAPHS attributes (ONNX Runtime crashes
// on a GRAPH attribute of a custom node), the ai.onnx and com.microsoft
// domains (the op names would reach the runtime's own kernels), tensors of
// more than kMaxElements elements.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opbridge/dtype.h"
#include "opbridge/spec.h"

namespace opbridge_fuzz {

// Element types, in the order the fuzz input numbers them (index 0, what an
// exhausted input reads, is float32): ONNX's TensorProto.DataType number (the
// same as ONNXTensorElementDataType), the name the library's shape rules use
// and the size, all from the SDK's dtype table.
struct Dtype {
  int onnx;
  const char* name;
  size_t size;
  bool floating;
};

constexpr Dtype FuzzDtype(opbridge::Dtype dtype) {
  const opbridge::DtypeRow* row = opbridge::DtypeRowOf(dtype);
  return {opbridge::OnnxElementType(dtype), row->name, static_cast<size_t>(row->bytes), row->floating};
}

inline constexpr Dtype kDtypes[] = {
    FuzzDtype(opbridge::Dtype::kFloat32),  FuzzDtype(opbridge::Dtype::kFloat16),
    FuzzDtype(opbridge::Dtype::kBFloat16), FuzzDtype(opbridge::Dtype::kFloat64),
    FuzzDtype(opbridge::Dtype::kUint8),    FuzzDtype(opbridge::Dtype::kInt64),
    FuzzDtype(opbridge::Dtype::kInt32),    FuzzDtype(opbridge::Dtype::kInt8),
    FuzzDtype(opbridge::Dtype::kBool),     FuzzDtype(opbridge::Dtype::kUint16),
    FuzzDtype(opbridge::Dtype::kInt16),    FuzzDtype(opbridge::Dtype::kUint32),
    FuzzDtype(opbridge::Dtype::kUint64),   FuzzDtype(opbridge::Dtype::kString),
};
inline constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);
inline constexpr int kStringDtype = kNumDtypes - 1;

struct Input {
  std::string name;       // empty: an absent optional input (or a missing one)
  bool fed = false;       // a graph input this model feeds (else an initializer, a reuse, or absent)
  bool sequence = false;  // declared and fed as a sequence of one tensor
  int dtype = 0;
  std::vector<int64_t> dims;
  std::string data;  // raw bytes (not for strings)
};

inline int64_t Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// One drawn case: the model's bytes and what the invariant needs.
struct Case {
  const opbridge::OpSpec* spec = nullptr;
  std::string bytes;  // the ModelProto
  std::vector<Input> inputs;
  std::vector<std::string> output_names;
  std::string invalid;  // why the node is invalid (it must then not run); empty: valid
  // The node's domain is imported at a version below 1. ONNX Runtime refuses
  // it; OpenVINO's ONNX reader matches a node to an extension by domain and
  // op type only (opbridge.runtimes.openvino.read_model checks the version).
  bool domain_version_invalid = false;
  bool attrs_known = true;  // false: what the library reads is not known here (no shape check)
  std::vector<opbridge::AttrValue> expected_attrs;
};

// Draws a case from fdp; specs: the library's operators (not empty).
Case BuildCase(FuzzedDataProvider& fdp, const std::vector<const opbridge::OpSpec*>& specs);

// What a runtime returned for one output.
struct Seen {
  std::string dtype;  // the shape rules' name ("float32"), "?" for another type
  std::vector<int64_t> shape;
};

// The invariant after a successful run: the node is valid, and its outputs
// are what the spec's shape rule gives for the fed inputs and the attributes
// the node carries. Aborts (Violation) when it is broken.
void CheckOutputs(const Case& c, const std::vector<Seen>& outputs);

// The shape rules' name of an ONNX element type, "?" for one not in kDtypes.
const char* DtypeName(int onnx_type);

// OPBRIDGE_FUZZ_VERBOSE=1: Say prints each outcome. OPBRIDGE_FUZZ_DUMP=<file>:
// DumpModel writes the model, to read with onnx.load when reproducing one.
// Init also reads the library's specs (aborts when there are none).
void Init();
// The library's specs, read by Init: what BuildCase draws from.
const std::vector<const opbridge::OpSpec*>& Specs();
void Say(const char* what, const std::string& detail);
void DumpModel(const Case& c);
[[noreturn]] void Violation(const std::string& message);

}  // namespace opbridge_fuzz
