// The OpenVINO extension library: one generic ov::op::Op (SpecNode) serves
// every registered OpSpec of the library, and each spec gets these extensions:
//   - an ONNX frontend conversion (domain, op type, attributes with the
//     spec's defaults) that turns the library's ONNX node into a SpecNode, so
//     core.read_model("model.onnx") reads a custom-route model;
//   - two PyTorch frontend conversions, of the op as a torch.export program
//     names it ("<namespace>.<op>.default") and as TorchScript names it
//     ("<namespace>::<op>"), into the same SpecNode, so
//     openvino.convert_model converts a program that calls the library's ops;
//   - an op extension under the spec's own type name (the ONNX op type) and
//     version (the ONNX domain), so an IR written by ov.save_model reads back.
//
// Shapes and dtypes come from the spec's shape rule, raised as OpenVINO's own
// NodeValidationFailure (a Python exception, never a crash); evaluate() runs
// the same CPU kernel as the PyTorch and ONNX Runtime adapters, with
// OpenVINO's parallel-for, so a kernel shares the plugin's TBB arena instead
// of starting threads of its own.
//
// The C++ API is used only through openvino::runtime and the ONNX and
// PyTorch frontends' header-only ConversionExtensions (a converter sees only
// the frontends' common NodeContext). An extension is C++ all the
// way: it only works in the OpenVINO release it was compiled against, which
// opbridge_openvino_built_with() reports (opbridge doctor compares it with
// the running one). It and OPENVINO_CREATE_EXTENSIONS are the library's only
// exported symbols.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/core/parallel.hpp>
#include <openvino/core/version.hpp>
#include <openvino/frontend/node_context.hpp>
#include <openvino/frontend/onnx/extension/conversion.hpp>
#include <openvino/frontend/pytorch/extension/conversion.hpp>
#include <openvino/frontend/sequence_mark.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/op.hpp>
#include <openvino/op/result.hpp>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/adapter_kit.h"
#include "opbridge/library.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/spec.h"

namespace opbridge {
namespace {

// The IR attribute that records which of the spec's inputs a node has: an
// absent optional input in the middle of the list (layer_norm with a bias
// and no weight) leaves no port behind, so the ports alone cannot say.
constexpr const char* kInputsAttribute = "opbridge_inputs";

// OpenVINO's element types of the dtypes in the kit's table.
constexpr std::pair<ov::element::Type_t, Dtype> kElementTypes[] = {
    {ov::element::Type_t::f32, Dtype::kFloat32},  {ov::element::Type_t::f64, Dtype::kFloat64},
    {ov::element::Type_t::f16, Dtype::kFloat16},  {ov::element::Type_t::bf16, Dtype::kBFloat16},
    {ov::element::Type_t::i8, Dtype::kInt8},      {ov::element::Type_t::u8, Dtype::kUint8},
    {ov::element::Type_t::i16, Dtype::kInt16},    {ov::element::Type_t::u16, Dtype::kUint16},
    {ov::element::Type_t::i32, Dtype::kInt32},    {ov::element::Type_t::u32, Dtype::kUint32},
    {ov::element::Type_t::i64, Dtype::kInt64},    {ov::element::Type_t::u64, Dtype::kUint64},
    {ov::element::Type_t::boolean, Dtype::kBool}, {ov::element::Type_t::string, Dtype::kString},
};

const char* DtypeName(const ov::element::Type& type) {
  for (const auto& [element, dtype] : kElementTypes) {
    if (element == static_cast<ov::element::Type_t>(type)) return opbridge::DtypeName(dtype);
  }
  return "an unsupported element type";
}

ov::element::Type ElementType(const std::string& name) {
  const Dtype dtype = DtypeFromName(name);
  for (const auto& [element, d] : kElementTypes) {
    if (d == dtype) return element;
  }
  return ov::element::dynamic;
}

// The integer types OpenVINO's CPU plugin computes in another (the model's
// type, the type the plugin uses). The CPU plugin computes integers in i32
// only: its ConvertPrecision pass (intel_cpu's transformation_pipeline.cpp)
// turns every i64, u64, i16, u16 and u32 tensor between two nodes into i32,
// and every boolean into u8, keeping only the model's own inputs and outputs
// as they are (a Convert after each such input, before each such output).
// An extension's node is no exception: a node first validated with an int64
// input is validated again, and run, with an int32 one. OpenVINO has no
// setting that keeps i64 (its KeepConstPrecision marks constants only), so
// the node takes the model's type back (SpecNode::ModelType): the shape rule
// and the kernel see the dtype the spec declares, and the kernel writes the
// dtype the rule declares (SpecNode::OutputType says which type OpenVINO
// gets). What the plugin could not keep, an int64 beyond int32's range, is
// lost before the node, as in OpenVINO's own operators.
constexpr std::pair<ov::element::Type_t, ov::element::Type_t> kLoweredIntegers[] = {
    {ov::element::Type_t::i64, ov::element::Type_t::i32},
    {ov::element::Type_t::u64, ov::element::Type_t::i32},
    {ov::element::Type_t::i16, ov::element::Type_t::i32},
    {ov::element::Type_t::u16, ov::element::Type_t::i32},
    {ov::element::Type_t::u32, ov::element::Type_t::i32},
    {ov::element::Type_t::boolean, ov::element::Type_t::u8},
};

// The type OpenVINO's CPU plugin computes `type` in (kLoweredIntegers).
ov::element::Type LoweredType(const ov::element::Type& type) {
  for (const auto& [from, to] : kLoweredIntegers) {
    if (type == from) return to;
  }
  return type;
}

// Whether OpenVINO gives a tensor of type `model` as `given` (kLoweredIntegers).
bool IsLowered(const ov::element::Type& model, const ov::element::Type& given) {
  return model != given && LoweredType(model) == given;
}

// Calls body(T{}) with the C++ type of an element type of kLoweredIntegers
// (boolean: one byte, 0 or 1); false for another type.
template <typename Body>
bool WithIntegerType(const ov::element::Type& type, Body&& body) {
  switch (static_cast<ov::element::Type_t>(type)) {
    case ov::element::Type_t::i64:
      body(int64_t{});
      return true;
    case ov::element::Type_t::u64:
      body(uint64_t{});
      return true;
    case ov::element::Type_t::i32:
      body(int32_t{});
      return true;
    case ov::element::Type_t::u32:
      body(uint32_t{});
      return true;
    case ov::element::Type_t::i16:
      body(int16_t{});
      return true;
    case ov::element::Type_t::u16:
      body(uint16_t{});
      return true;
    case ov::element::Type_t::u8:
    case ov::element::Type_t::boolean:
      body(uint8_t{});
      return true;
    default:
      return false;
  }
}

// The op's OpenVINO type: name = the ONNX op type, version = the ONNX domain.
// Built once per spec and never freed: nodes and extensions keep pointers to
// it for as long as OpenVINO keeps this library loaded.
const ov::DiscreteTypeInfo& TypeInfoOf(const OpSpec& spec) {
  static std::mutex mutex;
  static auto* types = new std::map<const OpSpec*, std::unique_ptr<ov::DiscreteTypeInfo>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& type = (*types)[&spec];
  if (!type) {
    type = std::make_unique<ov::DiscreteTypeInfo>(spec.onnx_type, ThisLibrary().onnx_domain,
                                                  &ov::op::Op::get_type_info_static());
    type->hash();
  }
  return *type;
}

// OpenVINO's own NodeValidationFailure with opbridge's text first: the one
// NODE_VALIDATION_CHECK throws starts with the node's name as the model gives
// it, and a NUL there cuts the message before the reason in every what().
class SpecValidationFailure : public ov::NodeValidationFailure {
 public:
  explicit SpecValidationFailure(const std::string& message) : ov::NodeValidationFailure(message) {}
};

// Whether two values of an attribute of type `type` are the same (a NaN the
// same as a NaN).
bool SameValue(AttrType type, const AttrValue& a, const AttrValue& b) {
  const auto same = [](double x, double y) { return x == y || (x != x && y != y); };
  switch (type) {
    case AttrType::kString:
      return a.text == b.text;
    case AttrType::kFloats:
      return a.numbers.size() == b.numbers.size() &&
             std::equal(a.numbers.begin(), a.numbers.end(), b.numbers.begin(), same);
    default:
      return same(a.number, b.number);
  }
}

ParallelFor OpenVinoParallelFor() {
  return [](int64_t n, int64_t grain, const RangeBody& body) {
    ForGrainTasks(n, grain, body, [](int64_t tasks, const auto& task_body) {
      ov::parallel_for(static_cast<size_t>(tasks),
                       [&](size_t task) { task_body(static_cast<int64_t>(task)); });
      return true;
    });
  };
}

// Copies `from` into `to` (the same shape; types of kLoweredIntegers), each
// value converted as OpenVINO's Convert does (a boolean is 0 or 1), on
// OpenVINO's threads.
void CopyConverted(const ov::Tensor& from, ov::Tensor to) {
  const int64_t size = static_cast<int64_t>(from.get_size());
  const bool to_boolean = to.get_element_type() == ov::element::boolean;
  const bool known = WithIntegerType(from.get_element_type(), [&](auto source_zero) {
    using Source = decltype(source_zero);
    WithIntegerType(to.get_element_type(), [&](auto target_zero) {
      using Target = decltype(target_zero);
      const Source* source = static_cast<const Source*>(from.data());
      Target* target = static_cast<Target*>(to.data());
      OpenVinoParallelFor()(size, 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          target[i] = to_boolean ? static_cast<Target>(source[i] != 0) : static_cast<Target>(source[i]);
        }
      });
    });
  });
  OPENVINO_ASSERT(known, "opbridge: no conversion from ", from.get_element_type(), " to ",
                  to.get_element_type());
}

// One operator of the library, whichever spec it is.
class SpecNode : public ov::op::Op {
 public:
  using ov::op::Op::evaluate;

  // For the IR reader: ports and attributes come afterwards.
  explicit SpecNode(const OpSpec& spec)
      : spec_(&spec), present_(spec.inputs.size(), true), attrs_(OnnxDefaultValues(spec)) {}

  // `name` (the ONNX node's) names the node in a validation error too.
  SpecNode(const OpSpec& spec, const ov::OutputVector& inputs, std::vector<bool> present,
           std::vector<AttrValue> attrs, const std::string& name = "")
      : ov::op::Op(inputs), spec_(&spec), present_(std::move(present)), attrs_(std::move(attrs)) {
    if (!name.empty()) set_friendly_name(name);
    constructor_validate_and_infer_types();
  }

  const ov::DiscreteTypeInfo& get_type_info() const override { return TypeInfoOf(*spec_); }

  void validate_and_infer_types() override {
    const OpSpec& spec = *spec_;
    size_t expected_ports = 0;
    for (bool present : present_) expected_ports += present ? 1 : 0;
    if (get_input_size() != expected_ports) {
      throw SpecValidationFailure(spec.QualifiedName() + ": expects " + std::to_string(expected_ports) +
                                  " inputs (" + kInputsAttribute + " '" + PresentText() + "' of " +
                                  InputList(spec) + "), the node has " + std::to_string(get_input_size()) +
                                  NodeSuffix());
    }
    std::vector<TensorInfo> inputs(spec.inputs.size());
    // The rule sees each dynamic dimension as an unknown one (opbridge/dim.h):
    // a size it computes from one is dynamic, not the arithmetic of -1.
    UnknownDims unknown;
    const DimSymbolsScope scope(&unknown);
    bool known = true;
    bool types_known = true;
    bool lowered = false;  // whether OpenVINO lowered an input (kLoweredIntegers)
    size_t port = 0;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (!present_[i]) {
        inputs[i].present = false;
        continue;
      }
      const ov::element::Type& type = get_input_element_type(port);
      const ov::PartialShape& shape = get_input_partial_shape(port);
      // The rule sees the model's dtype where OpenVINO lowered it.
      const ov::element::Type model_type = ModelType(port, type);
      lowered = lowered || model_type != type;
      inputs[i].dtype = DtypeName(model_type);
      ++port;
      known = known && !type.is_dynamic() && shape.rank().is_static();
      types_known = types_known && !type.is_dynamic();
      if (shape.rank().is_dynamic()) continue;
      for (const ov::Dimension& dim : shape) {
        const size_t d = inputs[i].shape.size();
        inputs[i].shape.push_back(dim.is_static() ? Dim(dim.get_length()) : unknown.Input(i, d));
      }
    }
    if (model_types_.empty() && types_known) {
      for (size_t p = 0; p < get_input_size(); ++p) model_types_.push_back(get_input_element_type(p));
    }
    set_output_size(spec.outputs.size());
    if (!known) {
      // Checked again when the types are known (and before every run); the
      // output dtypes are declared where the shape rule gives them anyway.
      const std::vector<ov::element::Type> types = OutputTypesOfUnknownRanks(inputs, types_known);
      for (size_t k = 0; k < spec.outputs.size(); ++k) {
        set_output_type(k, k < types.size() ? OutputType(k, types[k], lowered) : ov::element::dynamic,
                        ov::PartialShape::dynamic());
      }
      return;
    }
    std::vector<TensorInfo> outputs;
    const Status status = InferWithAttrs(spec, inputs, attrs_, &outputs);
    if (!status.ok()) throw SpecValidationFailure(status.message() + NodeSuffix());
    for (size_t k = 0; k < outputs.size() && k < spec.outputs.size(); ++k) {
      std::vector<ov::Dimension> dims;
      for (const Dim& dim : outputs[k].shape) {
        const bool dynamic = dim.symbolic() || dim < 0;
        dims.push_back(dynamic ? ov::Dimension::dynamic() : ov::Dimension(static_cast<int64_t>(dim)));
      }
      set_output_type(k, OutputType(k, ElementType(outputs[k].dtype), lowered), ov::PartialShape(dims));
    }
  }

  // For a reader (the IR's, Python's NodeFactory): reads the attributes
  // from `visitor` twice, from two different starting values, so that an
  // attribute the reader does not have (which leaves the value as it was) is
  // told from one it has; an absent one takes the spec's default, as in ONNX
  // Runtime, and an absent required one is an error naming the attribute.
  void ReadAttributes(ov::AttributeVisitor& visitor) {
    const OpSpec& spec = *spec_;
    std::vector<AttrValue> first(spec.attrs.size());
    std::vector<AttrValue> second(spec.attrs.size());
    for (AttrValue& value : second) {
      value.number = 1.0;
      value.text = "\x01";
      value.numbers = {1.0};
    }
    attrs_ = first;
    visit_attributes(visitor);
    first = attrs_;
    attrs_ = second;
    visit_attributes(visitor);
    for (size_t i = 0; i < spec.attrs.size(); ++i) {
      const AttrSpec& attr = spec.attrs[i];
      if (SameValue(attr.type, first[i], attrs_[i])) continue;
      if (!attr.has_default) {
        OPENVINO_THROW(spec.QualifiedName(), ": attribute '", attr.name, "' must be present with type ",
                       OnnxAttributeType(attr.type), " (", AttrTypeName(attr.type),
                       "): it has no default and the node does not have it");
      }
      attrs_[i] = OnnxDefaultValue(attr);
    }
  }

  bool visit_attributes(ov::AttributeVisitor& visitor) override {
    const OpSpec& spec = *spec_;
    std::string inputs = PresentText();
    visitor.on_attribute(kInputsAttribute, inputs);
    SetPresent(inputs);
    attrs_.resize(spec.attrs.size());
    for (size_t i = 0; i < spec.attrs.size(); ++i) {
      const std::string name = spec.attrs[i].name;
      AttrValue& value = attrs_[i];
      switch (spec.attrs[i].type) {
        case AttrType::kFloat: {
          float number = static_cast<float>(value.number);
          visitor.on_attribute(name, number);
          value.number = number;
          break;
        }
        case AttrType::kInt: {
          int64_t number = static_cast<int64_t>(value.number);
          visitor.on_attribute(name, number);
          value.number = static_cast<double>(number);
          break;
        }
        case AttrType::kBool: {
          bool flag = value.number != 0.0;
          visitor.on_attribute(name, flag);
          value.number = flag ? 1.0 : 0.0;
          break;
        }
        case AttrType::kString:
          visitor.on_attribute(name, value.text);
          break;
        case AttrType::kFloats: {
          std::vector<float> numbers(value.numbers.begin(), value.numbers.end());
          visitor.on_attribute(name, numbers);
          value.numbers.assign(numbers.begin(), numbers.end());
          break;
        }
      }
    }
    return true;
  }

  std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override {
    ov::check_new_args_count(this, inputs);
    std::shared_ptr<SpecNode> clone(new SpecNode(*spec_, present_, attrs_, model_types_));
    clone->set_arguments(inputs);
    clone->constructor_validate_and_infer_types();
    return clone;
  }

  bool has_evaluate() const override { return true; }

  bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
    const OpSpec& spec = *spec_;
    KernelArgs args;
    // The inputs OpenVINO lowered (kLoweredIntegers), in the model's type
    // again, and the outputs it takes in a lowered type, as the kernel
    // writes them (the spec's type) before they are copied into OpenVINO's.
    std::vector<ov::Tensor> restored_inputs;
    std::vector<std::pair<ov::Tensor, size_t>> lowered_outputs;
    size_t port = 0;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      TensorInfo info;
      const void* data = nullptr;
      if (!present_[i] || port >= inputs.size()) {
        info.present = false;
      } else {
        const ov::Tensor& tensor = inputs[port];
        const ov::element::Type type = ModelType(port++, tensor.get_element_type());
        info.dtype = DtypeName(type);
        for (size_t dim : tensor.get_shape()) info.shape.push_back(static_cast<int64_t>(dim));
        if (type == tensor.get_element_type()) {
          data = tensor.data();
        } else {
          restored_inputs.emplace_back(type, tensor.get_shape());
          CopyConverted(tensor, restored_inputs.back());
          data = restored_inputs.back().data();
        }
      }
      args.inputs.push_back(data);
      args.input_infos.push_back(std::move(info));
    }
    Status status = InferWithAttrs(spec, args.input_infos, attrs_, &args.output_infos);
    if (!status.ok()) OPENVINO_THROW(status.message(), ConvertedInputsNote(inputs), NodeSuffix());
    if (outputs.size() < args.output_infos.size()) outputs.resize(args.output_infos.size());
    for (size_t k = 0; k < args.output_infos.size(); ++k) {
      const TensorInfo& info = args.output_infos[k];
      const ov::element::Type type = ElementType(info.dtype);
      ov::Shape shape(info.shape.begin(), info.shape.end());
      if (!outputs[k]) {
        outputs[k] = ov::Tensor(type, shape);
      } else {
        outputs[k].set_shape(shape);
      }
      const ov::element::Type& given = outputs[k].get_element_type();
      if (given == type) {
        args.outputs.push_back(outputs[k].data());
      } else if (IsLowered(type, given)) {
        lowered_outputs.emplace_back(ov::Tensor(type, shape), k);
        args.outputs.push_back(lowered_outputs.back().first.data());
      } else {
        // The kernel would write another size of element than the tensor holds.
        OPENVINO_THROW(spec.MessageName(), ": output '", spec.outputs[k], "' is ", info.dtype,
                       " by the op's shape rule, but OpenVINO gives the node a ", DtypeName(given),
                       " tensor for it", NodeSuffix());
      }
    }
    args.attrs = attrs_;
    args.parallel_for = OpenVinoParallelFor();
    // OPBRIDGE_CHECK: argument checks and output guards.
    status = LaunchOnHost(spec, args, spec.forward, [&spec] { return spec.MessageName(); });
    if (!status.ok()) OPENVINO_THROW(status.message(), ConvertedInputsNote(inputs), NodeSuffix());
    for (const auto& [written, k] : lowered_outputs) CopyConverted(written, outputs[k]);
    return true;
  }

 private:
  // The output dtypes when some input's rank is unknown: the shape rule's,
  // with each such input given the rank (0 to 8, all dimensions unknown)
  // that the rule first takes; dtypes follow the inputs' dtypes, not their
  // ranks. Dynamic where no rank passes or a dtype is unknown.
  std::vector<ov::element::Type> OutputTypesOfUnknownRanks(const std::vector<TensorInfo>& inputs,
                                                           bool types_known) const {
    if (!types_known) return {};
    std::vector<size_t> unknown;
    size_t port = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!present_[i]) continue;
      if (get_input_partial_shape(port++).rank().is_dynamic()) unknown.push_back(i);
    }
    for (size_t rank = 0; rank <= 8; ++rank) {
      std::vector<TensorInfo> trial = inputs;
      for (size_t i : unknown) trial[i].shape.assign(rank, -1);
      std::vector<TensorInfo> outputs;
      if (!InferWithAttrs(*spec_, trial, attrs_, &outputs).ok()) continue;
      std::vector<ov::element::Type> types;
      for (const TensorInfo& output : outputs) types.push_back(ElementType(output.dtype));
      return types;
    }
    return {};
  }

  // The type OpenVINO gets output `k` in, of `type` by the shape rule:
  // `type`, but where OpenVINO lowered the node's inputs (`lowered`: the
  // CPU plugin's ConvertPrecision runs) and the output feeds another of its
  // operators, which the plugin lowered too, the type it computes `type` in
  // (a Multiply of an int64 output and a constant the plugin made int32
  // fails otherwise: the plugin's InsertConvertAfterExtension converts an
  // extension's outputs only where its first output is int64). The kernel
  // still writes `type` (evaluate converts it); an output that only the
  // model's outputs (Results) or Converts read keeps `type`, and its values.
  ov::element::Type OutputType(size_t k, const ov::element::Type& type, bool lowered) const {
    if (!lowered || LoweredType(type) == type) return type;
    for (const ov::Input<ov::Node>& consumer : output(k).get_target_inputs()) {
      const ov::Node* node = consumer.get_node();
      if (!ov::is_type<ov::op::v0::Result>(node) && !ov::is_type<ov::op::v0::Convert>(node)) {
        return LoweredType(type);
      }
    }
    return type;
  }

  // The type input `port` has in the model, where OpenVINO gives the node
  // a type it lowered that one to (kLoweredIntegers), else `given`.
  ov::element::Type ModelType(size_t port, const ov::element::Type& given) const {
    if (port < model_types_.size() && IsLowered(model_types_[port], given)) return model_types_[port];
    return given;
  }

  // Where OpenVINO gives the node an input in another dtype than the
  // model's, which the kernel gets as it is (its CPU plugin runs a float16
  // or bfloat16 node in float32): a note for messages, naming the model's
  // dtype.
  std::string ConvertedInputsNote(const ov::TensorVector& inputs) const {
    std::string note;
    size_t port = 0;
    for (size_t i = 0; i < spec_->inputs.size() && port < inputs.size(); ++i) {
      if (!present_[i]) continue;
      if (port >= model_types_.size()) break;
      const ov::element::Type& declared = model_types_[port];
      const ov::element::Type& given = inputs[port].get_element_type();
      ++port;
      if (declared.is_dynamic() || declared == given || IsLowered(declared, given)) continue;
      note += std::string(note.empty() ? "" : ", ") + "'" + spec_->inputs[i].name + "' is " +
              DtypeName(declared) + " in the model";
    }
    if (note.empty()) return note;
    return std::string(" (OpenVINO runs this node in other dtypes than the model's: ") + note + ")";
  }

  // Which node of the model, at the end of a message: its name is the
  // model's text, escaped, and last.
  std::string NodeSuffix() const { return " [node " + QuotedForMessage(get_friendly_name()) + "]"; }

  // "x,bias": the spec's inputs this node has.
  std::string PresentText() const {
    std::string text;
    for (size_t i = 0; i < spec_->inputs.size(); ++i) {
      if (present_[i]) text += (text.empty() ? "" : ",") + std::string(spec_->inputs[i].name);
    }
    return text;
  }

  void SetPresent(const std::string& text) {
    std::vector<std::string> names;
    size_t start = 0;
    while (start <= text.size()) {
      const size_t comma = std::min(text.find(',', start), text.size());
      if (comma > start) names.push_back(text.substr(start, comma - start));
      start = comma + 1;
    }
    std::vector<bool> present(spec_->inputs.size(), false);
    for (const std::string& name : names) {
      bool found = false;
      for (size_t i = 0; i < spec_->inputs.size(); ++i) {
        if (name == spec_->inputs[i].name) present[i] = found = true;
      }
      OPENVINO_ASSERT(found, spec_->QualifiedName(), ": ", kInputsAttribute, " names ",
                      QuotedForMessage(name), ", which is not one of its inputs (", InputList(*spec_), ")");
    }
    for (size_t i = 0; i < spec_->inputs.size(); ++i) {
      OPENVINO_ASSERT(present[i] || spec_->inputs[i].optional, spec_->QualifiedName(), ": input '",
                      spec_->inputs[i].name, "' is required, but ", kInputsAttribute, " '", text,
                      "' lacks it");
    }
    present_ = std::move(present);
  }

  // For clone_with_new_inputs: the clone keeps the model's input types.
  SpecNode(const OpSpec& spec, std::vector<bool> present, std::vector<AttrValue> attrs,
           std::vector<ov::element::Type> model_types)
      : spec_(&spec),
        present_(std::move(present)),
        attrs_(std::move(attrs)),
        model_types_(std::move(model_types)) {}

  const OpSpec* spec_;
  std::vector<bool> present_;  // per spec input: whether the node has it
  std::vector<AttrValue> attrs_;
  // Per port: the input types the node was first validated with (the
  // model's), which a plugin may change (OpenVINO's CPU plugin runs a
  // float16 model in float32).
  std::vector<ov::element::Type> model_types_;
};

// Reads the ONNX node's attribute `attr`; an absent one takes the spec's
// default (as ONNX Runtime does), a mistyped or missing required one is an
// error naming the op, the attribute, the type expected and what the node has.
AttrValue ReadAttribute(const OpSpec& spec, const ov::frontend::NodeContext& node, const AttrSpec& attr) {
  const std::string where = " [node " + QuotedForMessage(node.get_name()) + "]";
  const std::string expected = spec.QualifiedName() + ": attribute '" + attr.name +
                               "' must be present with type " + OnnxAttributeType(attr.type) + " (" +
                               AttrTypeName(attr.type) + ")";
  const ov::Any any = node.get_attribute_as_any(attr.name);
  if (any.empty()) {
    if (attr.has_default) return OnnxDefaultValue(attr);
    OPENVINO_THROW(expected, ": it has no default and the node does not have it", where);
  }
  // The frontend holds FLOAT as double (the float widened, exactly), FLOATS
  // as std::vector<double>, INT as int64_t, STRING as std::string.
  switch (attr.type) {
    case AttrType::kFloat:
      if (any.is<double>()) return AttrValue(any.as<double>());
      break;
    case AttrType::kInt:
    case AttrType::kBool:
      if (any.is<int64_t>()) return AttrValue(static_cast<double>(any.as<int64_t>()));
      break;
    case AttrType::kString:
      if (any.is<std::string>()) return AttrValue(any.as<std::string>());
      break;
    case AttrType::kFloats:
      if (any.is<std::vector<double>>()) return AttrValue(any.as<std::vector<double>>());
      break;
  }
  std::string found = "another type (STRINGS, TENSOR, GRAPH, ...)";
  if (any.is<double>()) found = "type FLOAT";
  if (any.is<int64_t>()) found = "type INT";
  if (any.is<std::string>()) found = "type STRING";
  if (any.is<std::vector<double>>()) found = "type FLOATS";
  if (any.is<std::vector<int64_t>>()) found = "type INTS";
  OPENVINO_THROW(expected, "; the node has it with ", found, where);
}

// An input the ONNX frontend stands in for an empty input name.
bool IsAbsent(const ov::Output<ov::Node>& input) {
  const std::string type = input.get_node()->get_type_info().name;
  return type == "NullNode" || type == "Null";
}

// The ONNX node of the library's domain -> a SpecNode.
ov::OutputVector Convert(const OpSpec& spec, const ov::frontend::NodeContext& node) {
  const std::string where = " [node " + QuotedForMessage(node.get_name()) + "]";
  const size_t count = node.get_input_size();
  size_t required = 0;
  for (const InputSpec& input : spec.inputs) required += input.optional ? 0 : 1;
  if (count > spec.inputs.size()) {
    OPENVINO_THROW(spec.QualifiedName(), ": expects ", required,
                   required == spec.inputs.size() ? "" : " to " + std::to_string(spec.inputs.size()),
                   " inputs (", InputList(spec), "), the node has ", count, where);
  }
  ov::OutputVector inputs;
  std::vector<bool> present(spec.inputs.size(), false);
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (i < count) {
      ov::Output<ov::Node> input = node.get_input(static_cast<int>(i));
      if (!IsAbsent(input)) {
        inputs.push_back(input);
        present[i] = true;
        continue;
      }
    }
    if (!spec.inputs[i].optional) {
      OPENVINO_THROW(spec.QualifiedName(), ": input '", spec.inputs[i].name, "' is required (inputs ",
                     InputList(spec), "), the node has ", count, " inputs and not this one", where);
    }
  }
  std::vector<AttrValue> attrs;
  for (const AttrSpec& attr : spec.attrs) attrs.push_back(ReadAttribute(spec, node, attr));
  return std::make_shared<SpecNode>(spec, inputs, std::move(present), std::move(attrs), node.get_name())
      ->outputs();
}

// How a PyTorch program names and returns an op of the library, for the
// PyTorch frontend: a torch.export (FX) graph names it
// "<namespace>.<op>.default" and reads each element of a returned tuple
// through a getitem node on the op's one value; TorchScript names it
// "<namespace>::<op>" and gives the node one value per returned tensor.
enum class TorchForm { kExport, kTorchScript };

std::string TorchOpType(const OpSpec& spec, TorchForm form) {
  if (form == TorchForm::kTorchScript) return spec.TorchName();
  return std::string(ThisLibrary().torch_namespace) + "." + spec.name + ".default";
}

// The numbers of a constant argument as the PyTorch frontend gives them
// (get_values_from_const_input: a scalar, or a vector for a list, of the
// constant's element type) as doubles; false where `any` holds none of them.
template <typename T>
bool TakeNumbers(const ov::Any& any, std::vector<double>* numbers, bool* scalar) {
  if (any.is<T>()) {
    numbers->assign(1, static_cast<double>(any.as<T>()));
    *scalar = true;
    return true;
  }
  if (any.is<std::vector<T>>()) {
    const std::vector<T>& values = any.as<std::vector<T>>();
    numbers->assign(values.begin(), values.end());
    *scalar = false;
    return true;
  }
  return false;
}

bool NumbersOf(const ov::Any& any, std::vector<double>* numbers, bool* scalar) {
  return TakeNumbers<double>(any, numbers, scalar) || TakeNumbers<float>(any, numbers, scalar) ||
         TakeNumbers<int64_t>(any, numbers, scalar) || TakeNumbers<int32_t>(any, numbers, scalar) ||
         TakeNumbers<bool>(any, numbers, scalar) || TakeNumbers<uint64_t>(any, numbers, scalar) ||
         TakeNumbers<uint32_t>(any, numbers, scalar) || TakeNumbers<int16_t>(any, numbers, scalar) ||
         TakeNumbers<uint16_t>(any, numbers, scalar) || TakeNumbers<int8_t>(any, numbers, scalar);
}

// An argument given by keyword, where the frontend has it: a constant's
// output for a number or a list, the text for a string; empty otherwise.
ov::Any KeywordValue(const ov::frontend::NodeContext& node, const std::string& name) {
  const ov::Any any = node.get_attribute_as_any(name);
  if (any.is<std::string>()) return any;
  if (!any.is<ov::Output<ov::Node>>()) return {};
  const auto constant =
      ov::as_type_ptr<ov::op::v0::Constant>(any.as<ov::Output<ov::Node>>().get_node_shared_ptr());
  if (!constant) return {};
  const std::vector<double> values = constant->cast_vector<double>();
  if (constant->get_shape().empty() && values.size() == 1) return values[0];
  return values;
}

// The attribute `attr` of a PyTorch node, the argument at schema position
// `position` (after the tensor inputs): given positionally or by keyword,
// else the spec's default (torch.export leaves out trailing arguments that
// have their default); a missing required, non-constant or mistyped one is
// an error naming the op, the attribute and the type expected.
AttrValue ReadTorchAttribute(const OpSpec& spec, const ov::frontend::NodeContext& node, size_t position,
                             const AttrSpec& attr) {
  const std::string expected =
      spec.TorchName() + ": argument '" + attr.name + "' must be a constant " + AttrTypeName(attr.type);
  const std::string where = " [node " + QuotedForMessage(node.get_op_type()) + "]";
  ov::Any value;
  if (position < node.get_input_size()) {
    if (!node.input_is_none(position)) {
      try {
        value = node.get_values_from_const_input(static_cast<int>(position));
      } catch (const ov::Exception& error) {
        OPENVINO_THROW(expected, "; the node's is not (", error.what(), ")", where);
      }
    }
  } else {
    value = KeywordValue(node, attr.name);
  }
  if (value.empty()) {
    if (attr.has_default) return OnnxDefaultValue(attr);
    OPENVINO_THROW(expected, ": it has no default and the node does not give it", where);
  }
  std::vector<double> numbers;
  bool scalar = false;
  switch (attr.type) {
    case AttrType::kFloat:
    case AttrType::kInt:
    case AttrType::kBool:
      if (NumbersOf(value, &numbers, &scalar) && scalar) return AttrValue(numbers[0]);
      break;
    case AttrType::kString:
      // torch.export's string arrives as its UTF-8 bytes, TorchScript's as text.
      if (value.is<std::string>()) return AttrValue(value.as<std::string>());
      if (value.is<std::vector<uint8_t>>()) {
        const std::vector<uint8_t>& bytes = value.as<std::vector<uint8_t>>();
        return AttrValue(std::string(bytes.begin(), bytes.end()));
      }
      break;
    case AttrType::kFloats:
      if (NumbersOf(value, &numbers, &scalar) && !scalar) return AttrValue(numbers);
      break;
  }
  OPENVINO_THROW(expected, "; the node gives another kind of value", where);
}

// The PyTorch node of one of the library's ops -> a SpecNode. Its
// arguments come in the schema's order (TorchSchema: the tensor inputs,
// then the attributes); an optional input is absent where the node gives
// None or leaves it out. A torch.export node of an op with several outputs
// returns them as one sequence (ov::frontend::SequenceMark, the frontends'
// list or tuple), whose elements its getitem nodes take; the frontend drops
// the sequence once they have.
ov::OutputVector ConvertTorch(const OpSpec& spec, TorchForm form, const ov::frontend::NodeContext& node) {
  const std::string where = " [node " + QuotedForMessage(node.get_op_type()) + "]";
  const size_t count = node.get_input_size();
  const size_t arguments = spec.inputs.size() + spec.attrs.size();
  if (count > arguments) {
    OPENVINO_THROW(spec.TorchName(), ": expects at most ", arguments, " arguments (", spec.TorchSchema(),
                   "), the node has ", count, where);
  }
  ov::OutputVector inputs;
  std::vector<bool> present(spec.inputs.size(), false);
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (i < count) {
      if (!node.input_is_none(i)) {
        inputs.push_back(node.get_input(static_cast<int>(i)));
        present[i] = true;
      }
    } else if (!node.get_attribute_as_any(spec.inputs[i].name).empty()) {
      // Given by keyword: a tensor, or None, which the frontend cannot
      // turn into an input.
      try {
        inputs.push_back(node.get_input(spec.inputs[i].name));
        present[i] = true;
      } catch (const std::exception&) {
      }
    }
    if (!present[i] && !spec.inputs[i].optional) {
      OPENVINO_THROW(spec.TorchName(), ": input '", spec.inputs[i].name, "' is required (",
                     spec.TorchSchema(), "), the node does not give it", where);
    }
  }
  std::vector<AttrValue> attrs;
  for (size_t k = 0; k < spec.attrs.size(); ++k) {
    attrs.push_back(ReadTorchAttribute(spec, node, spec.inputs.size() + k, spec.attrs[k]));
  }
  auto op =
      std::make_shared<SpecNode>(spec, inputs, std::move(present), std::move(attrs), node.get_op_type());
  node.mark_node(op);
  if (form == TorchForm::kTorchScript || spec.outputs.size() == 1) return op->outputs();
  return {std::make_shared<ov::frontend::SequenceMark>(op->outputs())->output(0)};
}

// Reads a SpecNode back from an IR under the spec's type name and version.
class SpecOpExtension : public ov::BaseOpExtension {
 public:
  explicit SpecOpExtension(const OpSpec& spec) : spec_(&spec) {}

  const ov::DiscreteTypeInfo& get_type_info() const override { return TypeInfoOf(*spec_); }

  ov::OutputVector create(const ov::OutputVector& inputs, ov::AttributeVisitor& visitor) const override {
    auto node = std::make_shared<SpecNode>(*spec_);
    node->set_arguments(inputs);
    node->ReadAttributes(visitor);
    node->constructor_validate_and_infer_types();
    return node->outputs();
  }

  std::vector<ov::Extension::Ptr> get_attached_extensions() const override { return {}; }

 private:
  const OpSpec* spec_;
};

std::vector<ov::Extension::Ptr> LibraryExtensions() {
  std::vector<ov::Extension::Ptr> extensions;
  for (const OpSpec* spec : AllSpecs()) {
    extensions.push_back(std::make_shared<SpecOpExtension>(*spec));
    extensions.push_back(std::make_shared<ov::frontend::onnx::ConversionExtension>(
        spec->onnx_type, ThisLibrary().onnx_domain,
        [spec](const ov::frontend::NodeContext& node) { return Convert(*spec, node); }));
    for (const TorchForm form : {TorchForm::kExport, TorchForm::kTorchScript}) {
      extensions.push_back(std::make_shared<ov::frontend::pytorch::ConversionExtension>(
          TorchOpType(*spec, form),
          [spec, form](const ov::frontend::NodeContext& node) { return ConvertTorch(*spec, form, node); }));
    }
  }
  return extensions;
}

}  // namespace
}  // namespace opbridge

OPENVINO_CREATE_EXTENSIONS(opbridge::LibraryExtensions())

#define OPBRIDGE_STRINGIFY_INNER(x) #x
#define OPBRIDGE_STRINGIFY(x) OPBRIDGE_STRINGIFY_INNER(x)

// "2026.4.1": the OpenVINO release whose headers this library was built with.
extern "C" __attribute__((visibility("default"))) const char* opbridge_openvino_built_with() {
  return OPBRIDGE_STRINGIFY(OPENVINO_VERSION_MAJOR) "." OPBRIDGE_STRINGIFY(
      OPENVINO_VERSION_MINOR) "." OPBRIDGE_STRINGIFY(OPENVINO_VERSION_PATCH);
}
