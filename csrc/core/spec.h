// The single description of an operator's interface. The PyTorch schema, the
// ONNX node (domain, op type, attribute names) and the ONNX Runtime kernel
// registration are all derived from an OpSpec, so they cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"

namespace opbridge {

// The ONNX domain of the custom route and its version (a released contract).
inline constexpr const char* kOnnxDomain = "opbridge";
inline constexpr int kOnnxDomainVersion = 1;
// The PyTorch namespace: torch.ops.opbridge.<name>.
inline constexpr const char* kTorchNamespace = "opbridge";

enum class AttrType { kFloat, kInt, kBool, kString, kFloats };

struct AttrSpec {
  const char* name;
  AttrType type;
  bool has_default;
  double default_value;                // float, int and bool defaults
  const char* default_text = nullptr;  // string defaults
};

// An attribute's value as a kernel receives it: `number` for float, int and
// bool attributes, `text` for strings, `numbers` for float lists.
struct AttrValue {
  AttrValue() = default;
  AttrValue(double value) : number(value) {}                             // NOLINT: implicit on purpose
  AttrValue(std::string value) : text(std::move(value)) {}               // NOLINT
  AttrValue(std::vector<double> values) : numbers(std::move(values)) {}  // NOLINT

  double number = 0.0;
  std::string text;
  std::vector<double> numbers;
};

struct InputSpec {
  const char* name;
  bool optional;
};

// A tensor as the shape rule sees it. dtype is "float32", "int64", ...;
// a dimension of -1 is unknown (symbolic at shape-inference time).
using Shape = std::vector<int64_t>;
struct TensorInfo {
  bool present = true;  // false for an absent optional input
  std::string dtype;
  Shape shape;
};

// Validates dtypes and shapes and derives the outputs. Both adapters call it:
// PyTorch in its CPU and Meta kernels, ONNX Runtime at shape inference and
// before every run.
using InferFn = Status (*)(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);

// Everything a forward kernel needs, with no framework types. Inputs and
// outputs are contiguous; an absent optional input is a null pointer.
struct KernelArgs {
  std::vector<const void*> inputs;
  std::vector<TensorInfo> input_infos;
  std::vector<void*> outputs;
  std::vector<TensorInfo> output_infos;
  std::vector<AttrValue> attrs;  // in spec order
  ParallelFor parallel_for;
};
using LaunchFn = Status (*)(const KernelArgs& args);

// A shape rule that also sees the attributes (in spec order), for an op whose
// output shape depends on one or whose attributes need checking before a run.
using InferAttrsFn = Status (*)(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                std::vector<TensorInfo>* outputs);

struct OpSpec {
  const char* name;       // snake_case: the PyTorch op name.
  const char* onnx_type;  // CamelCase: the ONNX node op type.
  const char* doc;        // One line for generated documentation.
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  std::vector<const char*> outputs;
  // Backward op schema (PyTorch only; ONNX carries no gradients).
  const char* backward_schema;
  InferFn infer;
  LaunchFn forward;
  // Optional; when set, adapters that know the attributes use it instead of
  // `infer` (which then covers only callers without attributes).
  InferAttrsFn infer_attrs = nullptr;

  // "rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-06) -> Tensor"
  std::string TorchSchema() const;
  // "opbridge::RmsNorm" style name used in messages.
  std::string QualifiedName() const;
};

const char* AttrTypeName(AttrType type);

// spec.infer_attrs(inputs, attrs, outputs) when the op has one, else
// spec.infer(inputs, outputs).
Status InferWithAttrs(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                      const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs);

// Every registered operator's spec, sorted by name.
std::vector<const OpSpec*> AllSpecs();
const OpSpec* FindSpec(const std::string& name);

// Adds a spec to AllSpecs() during static initialisation.
struct SpecRegistrar {
  explicit SpecRegistrar(const OpSpec& spec);
};

}  // namespace opbridge

// Placed once in each operator's spec.cpp, so adding an operator needs no
// edit outside its folder.
#define OPBRIDGE_REGISTER_SPEC(spec) \
  [[maybe_unused]] static const ::opbridge::SpecRegistrar opbridge_spec_registrar_##spec{::opbridge::spec};
