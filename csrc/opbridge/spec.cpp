#include "opbridge/spec.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace opbridge {

const char* AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kFloat:
      return "float";
    case AttrType::kInt:
      return "int";
    case AttrType::kBool:
      return "bool";
    case AttrType::kString:
      return "str";
    case AttrType::kFloats:
      return "float[]";
  }
  return "?";
}

namespace {

std::string FormatDefault(const AttrSpec& attr) {
  char buffer[64];
  switch (attr.type) {
    case AttrType::kFloat: {
      // Shortest text that round-trips; ".0" so the schema parser sees a float.
      const auto result = std::to_chars(buffer, buffer + sizeof(buffer), attr.default_value);
      std::string text(buffer, result.ptr);
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      return text;
    }
    case AttrType::kInt:
      std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(attr.default_value));
      return buffer;
    case AttrType::kBool:
      return attr.default_value != 0.0 ? "True" : "False";
    case AttrType::kString:
      return std::string("'") + (attr.default_text ? attr.default_text : "") + "'";
    case AttrType::kFloats:
      return "[]";
  }
  return "";
}

}  // namespace

std::string OpSpec::TorchSchema() const {
  std::string schema = std::string(name) + "(";
  bool first = true;
  auto separator = [&]() {
    if (!first) schema += ", ";
    first = false;
  };
  for (const InputSpec& input : inputs) {
    separator();
    schema += input.optional ? "Tensor? " : "Tensor ";
    schema += input.name;
    if (input.optional) schema += "=None";
  }
  for (const AttrSpec& attr : attrs) {
    separator();
    schema += std::string(AttrTypeName(attr.type)) + " " + attr.name;
    if (attr.has_default) schema += "=" + FormatDefault(attr);
  }
  schema += ") -> ";
  if (outputs.size() == 1) {
    schema += "Tensor";
  } else {
    schema += "(";
    for (size_t i = 0; i < outputs.size(); ++i) schema += (i ? ", Tensor" : "Tensor");
    schema += ")";
  }
  return schema;
}

std::vector<std::string> OpSpec::OutArgumentNames() const {
  if (outputs.size() == 1) return {"out"};
  return std::vector<std::string>(outputs.begin(), outputs.end());
}

std::string OpSpec::TorchOutSchema() const {
  const std::string schema = TorchSchema();
  const size_t open = schema.find('(');
  const size_t close = schema.rfind(") -> ");
  std::string result = std::string(name) + ".out(" + schema.substr(open + 1, close - open - 1) + ", *";
  std::string returns;
  const std::vector<std::string> names = OutArgumentNames();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string alias = "Tensor(" + std::string(1, static_cast<char>('a' + i)) + "!)";
    result += ", " + alias + " " + names[i];
    returns += (i ? ", " : "") + alias;
  }
  return result + ") -> " + (names.size() == 1 ? returns : "(" + returns + ")");
}

Status InferWithAttrs(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                      const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs) {
  if (spec.infer_attrs != nullptr) return spec.infer_attrs(inputs, attrs, outputs);
  return spec.infer(inputs, outputs);
}

std::string OpSpec::BackwardName() const { return has_backward() ? std::string(name) + "_backward" : ""; }

std::string OpSpec::BackwardSchema() const {
  if (!has_backward()) return "";
  std::string schema = BackwardName() + "(";
  for (const BackwardInput& input : backward.inputs) {
    // A saved optional forward input may be absent.
    const bool optional = input.source == TensorSource::kInput && inputs.at(input.index).optional;
    schema += std::string(optional ? "Tensor? " : "Tensor ") + input.name + ", ";
  }
  for (const AttrSpec& attr : attrs) schema += std::string(AttrTypeName(attr.type)) + " " + attr.name + ", ";
  schema += "bool[" + std::to_string(backward.outputs.size()) + "] output_mask) -> ";
  if (backward.outputs.size() == 1) return schema + "Tensor";
  schema += "(";
  for (size_t i = 0; i < backward.outputs.size(); ++i) schema += (i ? ", Tensor" : "Tensor");
  return schema + ")";
}

std::string OpSpec::QualifiedName() const {
  return std::string(ThisLibrary().onnx_domain) + "::" + onnx_type;
}

std::string OpSpec::TorchName() const { return std::string(ThisLibrary().torch_namespace) + "::" + name; }

unsigned OpSpec::AllowedValues(const char* tensor) const {
  const auto own = [this](const std::string& wanted) {
    unsigned values = kFiniteValues;
    for (const ValueDomain& domain : value_domains) {
      if (wanted == domain.tensor) values |= domain.values;
    }
    return values;
  };
  const std::string argument = tensor;
  bool of_forward = false;
  for (const InputSpec& input : inputs) of_forward |= argument == input.name;
  for (const char* output : outputs) of_forward |= argument == output;
  if (of_forward) return own(argument);
  for (const BackwardInput& input : backward.inputs) {
    if (argument != input.name) continue;
    const size_t index = static_cast<size_t>(input.index);
    if (input.source == TensorSource::kInput && index < inputs.size()) return own(inputs[index].name);
    if (input.source == TensorSource::kOutput && index < outputs.size()) return own(outputs[index]);
    return kFiniteValues;
  }
  return kFiniteValues;
}

std::string OpSpec::MessageName() const { return TorchName() + " (ONNX " + QualifiedName() + ")"; }

namespace {

std::vector<const OpSpec*>& MutableSpecs() {
  static std::vector<const OpSpec*> specs;
  return specs;
}

std::vector<SpecListener>& Listeners() {
  static std::vector<SpecListener> listeners;
  return listeners;
}

}  // namespace

SpecRegistrar::SpecRegistrar(const OpSpec& spec) {
  MutableSpecs().push_back(&spec);
  for (SpecListener listener : Listeners()) listener(spec);
}

void OnEachSpec(SpecListener listener) {
  Listeners().push_back(listener);
  for (const OpSpec* spec : MutableSpecs()) listener(*spec);
}

Status CheckGradients(const OpSpec& spec) {
  if (!spec.has_backward()) return Status::Ok();
  const BackwardSpec& backward = spec.backward;
  for (const char* name : backward.no_gradient) {
    bool known = false;
    for (const InputSpec& input : spec.inputs) known = known || std::strcmp(input.name, name) == 0;
    if (!known) {
      return Status::Error(spec.TorchName() + ": NoGradient(\"" + name + "\") names no input of the op");
    }
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const char* name = spec.inputs[i].name;
    const bool mapped = i < backward.input_grads.size() && backward.input_grads[i] >= 0;
    bool declared = false;
    for (const char* none : backward.no_gradient) declared = declared || std::strcmp(none, name) == 0;
    if (mapped && declared) {
      return Status::Error(spec.TorchName() + ": input '" + name +
                           "' is declared NoGradient but InputGradients maps it to backward output " +
                           std::to_string(backward.input_grads[i]));
    }
    if (!mapped && !declared) {
      return Status::Error(spec.TorchName() + ": input '" + name +
                           "' gets no gradient: InputGradients maps no backward output to it; map its "
                           "gradient there, or declare .NoGradient(\"" +
                           name + "\") if it takes none (an integer input, a constant table)");
    }
  }
  return Status::Ok();
}

std::vector<const OpSpec*> AllSpecs() {
  std::vector<const OpSpec*> specs = MutableSpecs();
  std::sort(specs.begin(), specs.end(),
            [](const OpSpec* a, const OpSpec* b) { return std::strcmp(a->name, b->name) < 0; });
  return specs;
}

const OpSpec* FindSpec(const std::string& name) {
  for (const OpSpec* spec : MutableSpecs()) {
    if (name == spec->name || name == spec->onnx_type) return spec;
  }
  return nullptr;
}

}  // namespace opbridge
