// The single description of an operator's interface. The PyTorch schema, the
// ONNX node (domain, op type, attribute names) and the ONNX Runtime kernel
// registration are all derived from an OpSpec, so they cannot drift apart.
//
// OpSpec and its parts are plain aggregates. A spec is best written with the
// named builders at the end of this header (OpSpec::Builder, Input, Attr,
// GradOfOutput, SavedInput, Gradient, ...), which name every field where it
// is set:
//
//   inline const OpSpec kRmsNormSpec =
//       OpSpec::Builder("rms_norm", "RmsNorm")
//           .Doc("x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias), over the last dimension of x.")
//           .Inputs({Input("x"), Input("weight"), OptionalInput("bias")})
//           .Attrs({Attr::Float("eps", 1e-6)})
//           .Outputs({"y"})
//           .Infer(InferRmsNorm)
//           .Forward(LaunchRmsNorm)
//           .Backward(LaunchRmsNormBackward)
//           .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0), SavedInput("weight", 1)})
//           .BackwardOutputs({Gradient("grad_x").Like(1), Gradient("grad_weight").Like(2),
//                             Gradient("grad_bias").Like(2).Optional()})
//           .InputGradients({0, 1, 2});
//
// The aggregate (positional) form, OpSpec{"rms_norm", "RmsNorm", ...},
// describes the same spec and keeps compiling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/dim.h"
#include "opbridge/library.h"
#include "opbridge/parallel.h"
#include "opbridge/status.h"

// cudaStream_t, without CUDA's headers: the CUDA runtime declares it as
// `typedef struct CUstream_st* cudaStream_t`.
struct CUstream_st;

namespace opbridge {

using CudaStream = CUstream_st*;

// Device memory for a CUDA launch's scratch space: `bytes` bytes that stay
// valid for the work the launch enqueues on its stream; null on failure. The
// adapter owns it (PyTorch's caching allocator, ONNX Runtime's CUDA allocator).
using ScratchFn = std::function<void*(size_t bytes)>;

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
// each dimension is a Dim (opbridge/dim.h): a size, symbolic under
// torch.compile / torch.export, where the rule's arithmetic and comparisons
// are PyTorch's own on symbolic sizes. A negative size is unknown (ONNX
// Runtime's shape inference of a dimension with no value): shape rules
// compare only known dimensions and pass unknown ones through unchanged.
using Shape = std::vector<Dim>;
struct TensorInfo {
  bool present = true;  // false for an absent optional input
  std::string dtype;
  Shape shape;
};

// Validates dtypes and shapes and derives the outputs. Both adapters call it:
// PyTorch in its CPU and Meta kernels, ONNX Runtime at shape inference and
// before every run.
using InferFn = Status (*)(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);

// A launch's output pointers (KernelArgs::outputs): a std::vector<void*>
// that also notes which pointers the kernel took (read through a const
// KernelArgs), so that an adapter refuses a launch that returned Ok without
// taking a wanted output's pointer: that output would hold whatever the
// memory held (CheckOutputsTaken, opbridge/checks.h).
class OutputPointers {
 public:
  OutputPointers() = default;
  OutputPointers(std::initializer_list<void*> pointers) : pointers_(pointers), taken_(pointers_.size()) {}

  void push_back(void* pointer) {
    pointers_.push_back(pointer);
    taken_.push_back(false);
  }
  void reserve(size_t n) {
    pointers_.reserve(n);
    taken_.reserve(n);
  }
  void clear() {
    pointers_.clear();
    taken_.clear();
  }
  size_t size() const { return pointers_.size(); }
  bool empty() const { return pointers_.empty(); }
  // The adapter's access: sets a pointer, takes nothing.
  void*& operator[](size_t k) { return pointers_[k]; }
  // The kernel's access: takes pointer k.
  void* operator[](size_t k) const {
    taken_[k] = true;
    return pointers_[k];
  }
  void* at(size_t k) const {
    taken_.at(k) = true;
    return pointers_[k];
  }
  void* back() const { return (*this)[pointers_.size() - 1]; }
  std::vector<void*>::const_iterator begin() const {
    TakeAll();
    return pointers_.begin();
  }
  std::vector<void*>::const_iterator end() const { return pointers_.end(); }
  void* const* data() const {
    TakeAll();
    return pointers_.data();
  }
  // Whether the kernel took pointer k; pointer k without taking it.
  bool taken(size_t k) const { return taken_[k]; }
  void* peek(size_t k) const { return pointers_[k]; }
  void ForgetTaken() const { taken_.assign(taken_.size(), false); }

 private:
  void TakeAll() const { taken_.assign(taken_.size(), true); }
  std::vector<void*> pointers_;
  mutable std::vector<bool> taken_;
};

// Everything a forward kernel needs, with no framework types. Inputs and
// outputs are contiguous; an absent optional input is a null pointer.
struct KernelArgs {
  std::vector<const void*> inputs;
  std::vector<TensorInfo> input_infos;
  OutputPointers outputs;
  std::vector<TensorInfo> output_infos;
  std::vector<AttrValue> attrs;  // in spec order
  ParallelFor parallel_for;      // CPU launches
  // CUDA launches (opbridge/cuda.h): pointers are device pointers on the
  // current device, work goes on `stream`, scratch memory comes from `scratch`.
  CudaStream stream = nullptr;
  ScratchFn scratch;
};
using LaunchFn = Status (*)(const KernelArgs& args);

// A shape rule that also sees the attributes (in spec order), for an op whose
// output shape depends on one or whose attributes need checking before a run.
using InferAttrsFn = Status (*)(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                std::vector<TensorInfo>* outputs);

// Where a backward kernel's tensor argument comes from.
enum class TensorSource {
  kGradOutput,  // the gradient of forward output `index` (zeros when unused)
  kInput,       // forward input `index`, saved for the backward
  kOutput,      // forward output `index`, saved for the backward
};

// Made by GradOfOutput, SavedInput or SavedOutput (below).
struct BackwardInput {
  const char* name;
  TensorSource source;
  int index;
  // For a gradient: the backward input (an index into BackwardSpec::inputs)
  // whose dtype and shape it must have; -1 leaves it to BackwardSpec::infer.
  int like = -1;

  // This input with `like` set to `backward_input`.
  constexpr BackwardInput Like(int backward_input) const {
    BackwardInput input = *this;
    input.like = backward_input;
    return input;
  }
};

// Made by Gradient (below).
struct BackwardOutput {
  const char* name;
  // The backward input (an index into BackwardSpec::inputs) whose shape and
  // dtype this gradient has; -1 when BackwardSpec::infer derives it.
  int like;
  // true: the kernel skips this gradient when nobody needs it (it then gets
  // a null pointer); false: it is always computed.
  bool optional = false;

  // This gradient with `like` set to `backward_input`.
  constexpr BackwardOutput Like(int backward_input) const {
    BackwardOutput output = *this;
    output.like = backward_input;
    return output;
  }
  // This gradient, computed only when needed (`optional` set).
  constexpr BackwardOutput Optional() const {
    BackwardOutput output = *this;
    output.optional = true;
    return output;
  }
};

// The backward of an operator, as the PyTorch adapter registers it: the op
// `<name>_backward(<inputs>, <forward attrs>, bool[N] output_mask) -> (<outputs>)`,
// with CPU and Meta kernels, and one autograd node that saves the inputs and
// outputs named here. ONNX carries no gradients, so only PyTorch uses it.
struct BackwardSpec {
  std::vector<BackwardInput> inputs;
  std::vector<BackwardOutput> outputs;
  // For each forward input, the backward output holding its gradient, or -1
  // (no gradient). Several inputs may share one output (x + residual).
  std::vector<int> input_grads;
  // Runs the backward: KernelArgs::inputs are `inputs` above (contiguous),
  // outputs the gradients (null where optional and not needed), attrs the
  // forward attributes in spec order.
  LaunchFn launch = nullptr;
  // Optional: output shapes for outputs with like == -1 (and extra checks).
  InferAttrsFn infer = nullptr;
  // The forward inputs declared to take no gradient (NoGradient below): an
  // integer input, a constant table. Every other input maps to a gradient
  // (input_grads), or the PyTorch adapter refuses the spec.
  std::vector<const char*> no_gradient = {};
};

// The values a tensor may hold beyond finite ones, as OPBRIDGE_CHECK's scan
// of a kernel's floating-point arguments reads them: by default only finite
// values, so a NaN or an infinity is an error naming the argument. Flags,
// combined with |: an attention mask takes -inf (kNegInf), a logsumexp of an
// empty row is -inf.
enum ValueSet : unsigned {
  kFiniteValues = 0,
  kNegInfValues = 1u << 0,
  kPosInfValues = 1u << 1,
  kInfValues = kNegInfValues | kPosInfValues,
  kNaNValues = 1u << 2,
};

// A forward input's or output's name and the ValueSet it takes (Values() below).
struct ValueDomain {
  const char* tensor;
  unsigned values;
};

struct OpSpec {
  class Builder;  // names each field where it is set (below)

  const char* name = nullptr;       // snake_case: the PyTorch op name.
  const char* onnx_type = nullptr;  // CamelCase: the ONNX node op type.
  const char* doc = nullptr;        // One line for generated documentation.
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  std::vector<const char*> outputs;
  InferFn infer = nullptr;
  LaunchFn forward = nullptr;
  // Optional; when set, adapters that know the attributes use it instead of
  // `infer` (which then covers only callers without attributes).
  InferAttrsFn infer_attrs = nullptr;
  // Without a backward (launch == nullptr) the op is not differentiable: a
  // backward through it raises an error naming the op.
  BackwardSpec backward = {};
  // Inputs and outputs that take more than finite values (ValueSet); the
  // rest take finite values only.
  std::vector<ValueDomain> value_domains = {};

  bool has_backward() const { return backward.launch != nullptr; }
  // The ValueSet of the forward input or output `tensor`, or of a backward
  // argument saved from one (a backward input's name: SavedInput and
  // SavedOutput take their tensor's); kFiniteValues for any other name.
  unsigned AllowedValues(const char* tensor) const;
  // "rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-06) -> Tensor"
  std::string TorchSchema() const;
  // "rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, float eps, bool[3] output_mask)
  //  -> (Tensor, Tensor, Tensor)"; empty without a backward.
  std::string BackwardName() const;
  std::string BackwardSchema() const;
  // "rms_norm.out(Tensor x, ..., float eps=1e-06, *, Tensor(a!) out) -> Tensor(a!)":
  // the same call writing into given tensors (PyTorch's out= convention); the
  // out arguments are named `out` for one output, else the spec's output names.
  std::string TorchOutSchema() const;
  std::vector<std::string> OutArgumentNames() const;
  // "opbridge::RmsNorm": the ONNX domain and op type, used in messages.
  std::string QualifiedName() const;
  // "opbridge::rms_norm": the PyTorch namespace and op name.
  std::string TorchName() const;
  // "opbridge::rms_norm (ONNX opbridge::RmsNorm)": both, as the messages of
  // the shared checks and of the ONNX runtimes' adapters name the op.
  std::string MessageName() const;
};

const char* AttrTypeName(AttrType type);

// ---------------------------------------------------------------------------
// Named builders: a spec whose every field is named where it is set (see the
// example at the top). Each makes the same aggregate the positional form does.

// Forward inputs: a tensor, or an optional one (a null pointer when absent).
constexpr InputSpec Input(const char* name) { return InputSpec{name, false}; }
constexpr InputSpec OptionalInput(const char* name) { return InputSpec{name, true}; }

// Attributes, by type: without a default the attribute is required;
// Attr::Float("eps", 1e-6) has the default 1e-6. Float lists are required.
struct Attr {
  static constexpr AttrSpec Float(const char* name) { return AttrSpec{name, AttrType::kFloat, false, 0.0}; }
  static constexpr AttrSpec Float(const char* name, double default_value) {
    return AttrSpec{name, AttrType::kFloat, true, default_value};
  }
  static constexpr AttrSpec Int(const char* name) { return AttrSpec{name, AttrType::kInt, false, 0.0}; }
  static constexpr AttrSpec Int(const char* name, int64_t default_value) {
    return AttrSpec{name, AttrType::kInt, true, static_cast<double>(default_value)};
  }
  static constexpr AttrSpec Bool(const char* name) { return AttrSpec{name, AttrType::kBool, false, 0.0}; }
  static constexpr AttrSpec Bool(const char* name, bool default_value) {
    return AttrSpec{name, AttrType::kBool, true, default_value ? 1.0 : 0.0};
  }
  static constexpr AttrSpec String(const char* name) { return AttrSpec{name, AttrType::kString, false, 0.0}; }
  static constexpr AttrSpec String(const char* name, const char* default_text) {
    return AttrSpec{name, AttrType::kString, true, 0.0, default_text};
  }
  static constexpr AttrSpec Floats(const char* name) { return AttrSpec{name, AttrType::kFloats, false, 0.0}; }
};

// Backward inputs: the gradient of forward output `output` (add .Like(i) to
// give it the dtype and shape of backward input i), or forward input `input`
// / output `output`, saved for the backward.
constexpr BackwardInput GradOfOutput(const char* name, int output) {
  return BackwardInput{name, TensorSource::kGradOutput, output};
}
constexpr BackwardInput SavedInput(const char* name, int input) {
  return BackwardInput{name, TensorSource::kInput, input};
}
constexpr BackwardInput SavedOutput(const char* name, int output) {
  return BackwardInput{name, TensorSource::kOutput, output};
}

// A backward output: a gradient, shaped by BackwardSpec::infer unless
// .Like(i) gives it backward input i's dtype and shape; always computed
// unless .Optional().
constexpr BackwardOutput Gradient(const char* name) { return BackwardOutput{name, -1, false}; }

// An OpSpec, field by field; converts to the OpSpec it describes:
//   inline const OpSpec kSpec = OpSpec::Builder("soft_cap", "SoftCap").Doc(...)...;
// Fields not set keep the aggregate's defaults (no doc, no backward, ...).
class OpSpec::Builder {
 public:
  // name: snake_case, the PyTorch op name; onnx_type: CamelCase, the ONNX
  // node op type.
  Builder(const char* name, const char* onnx_type) {
    spec_.name = name;
    spec_.onnx_type = onnx_type;
  }

  Builder& Doc(const char* value) {
    spec_.doc = value;
    return *this;
  }
  // Input(...) and OptionalInput(...), in call order.
  Builder& Inputs(std::vector<InputSpec> value) {
    spec_.inputs = std::move(value);
    return *this;
  }
  // Attr::Float(...), Attr::Int(...), ..., in call order.
  Builder& Attrs(std::vector<AttrSpec> value) {
    spec_.attrs = std::move(value);
    return *this;
  }
  Builder& Outputs(std::vector<const char*> value) {
    spec_.outputs = std::move(value);
    return *this;
  }
  Builder& Infer(InferFn value) {
    spec_.infer = value;
    return *this;
  }
  Builder& InferAttrs(InferAttrsFn value) {
    spec_.infer_attrs = value;
    return *this;
  }
  Builder& Forward(LaunchFn value) {
    spec_.forward = value;
    return *this;
  }

  // The backward (BackwardSpec), field by field: its kernel, its inputs
  // (GradOfOutput, SavedInput, SavedOutput), its outputs (Gradient), the
  // output holding each forward input's gradient (-1: none), and the
  // optional shape rule for outputs without .Like.
  Builder& Backward(LaunchFn value) {
    spec_.backward.launch = value;
    return *this;
  }
  Builder& BackwardInputs(std::vector<BackwardInput> value) {
    spec_.backward.inputs = std::move(value);
    return *this;
  }
  Builder& BackwardOutputs(std::vector<BackwardOutput> value) {
    spec_.backward.outputs = std::move(value);
    return *this;
  }
  Builder& InputGradients(std::vector<int> value) {
    spec_.backward.input_grads = std::move(value);
    return *this;
  }
  Builder& InferBackward(InferAttrsFn value) {
    spec_.backward.infer = value;
    return *this;
  }
  // Forward input `input` takes no gradient (an integer input, a constant
  // table): with a backward, every input either maps to a gradient
  // (InputGradients) or is declared here, so that a forgotten gradient is an
  // error when the library registers, not a silent None.
  Builder& NoGradient(const char* input) {
    spec_.backward.no_gradient.push_back(input);
    return *this;
  }
  // The values forward input or output `tensor` takes beyond finite ones
  // (ValueSet flags: kNegInfValues, kInfValues, kNaNValues, ...), which
  // OPBRIDGE_CHECK's scan then lets through: .Values("mask", kNegInfValues).
  Builder& Values(const char* tensor, unsigned values) {
    spec_.value_domains.push_back(ValueDomain{tensor, values});
    return *this;
  }

  const OpSpec& spec() const { return spec_; }
  operator OpSpec() const { return spec_; }  // NOLINT: implicit on purpose

 private:
  OpSpec spec_;
};

// spec.infer_attrs(inputs, attrs, outputs) when the op has one, else
// spec.infer(inputs, outputs).
Status InferWithAttrs(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                      const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs);

// With a backward: every forward input maps to a gradient (input_grads) or
// is declared NoGradient, and no input is both; an error naming the op and
// the input otherwise.
Status CheckGradients(const OpSpec& spec);

// Every registered operator's spec, sorted by name.
std::vector<const OpSpec*> AllSpecs();
const OpSpec* FindSpec(const std::string& name);

// Adds a spec to AllSpecs() during static initialisation.
struct SpecRegistrar {
  explicit SpecRegistrar(const OpSpec& spec);
};

// Calls `listener` for every spec registered so far and for every one
// registered later: how an adapter registers each operator whatever the
// order of static initialisation.
using SpecListener = void (*)(const OpSpec& spec);
void OnEachSpec(SpecListener listener);

}  // namespace opbridge

#define OPBRIDGE_CONCAT_INNER(a, b) a##b
#define OPBRIDGE_CONCAT(a, b) OPBRIDGE_CONCAT_INNER(a, b)

// Placed once in each operator's spec.cpp (at namespace scope, after the
// spec), so that no C++ outside the operator's folder lists it (its Python
// card and call are the rest, docs/contributing.md):
//   OPBRIDGE_REGISTER_SPEC(mylib::kSoftCapSpec)
#define OPBRIDGE_REGISTER_SPEC(spec)                                                                \
  [[maybe_unused]] static const ::opbridge::SpecRegistrar OPBRIDGE_CONCAT(opbridge_spec_registrar_, \
                                                                          __LINE__){spec};
