#include "opbridge/adapter_kit.h"

namespace opbridge {

std::vector<const char*> ForwardInputNames(const OpSpec& spec) {
  std::vector<const char*> names;
  names.reserve(spec.inputs.size());
  for (const InputSpec& input : spec.inputs) names.push_back(input.name);
  return names;
}

std::vector<const char*> BackwardInputNames(const OpSpec& spec) {
  std::vector<const char*> names;
  names.reserve(spec.backward.inputs.size());
  for (const BackwardInput& input : spec.backward.inputs) names.push_back(input.name);
  return names;
}

std::string InputList(const OpSpec& spec) {
  std::string names;
  for (const InputSpec& input : spec.inputs) {
    names += (names.empty() ? "" : ", ") + std::string(input.name) + (input.optional ? "?" : "");
  }
  return names;
}

const char* OnnxAttributeType(AttrType type) {
  switch (type) {
    case AttrType::kFloat:
      return "FLOAT";
    case AttrType::kInt:
    case AttrType::kBool:
      return "INT";
    case AttrType::kString:
      return "STRING";
    case AttrType::kFloats:
      return "FLOATS";
  }
  return "?";
}

AttrValue OnnxDefaultValue(const AttrSpec& attr) {
  AttrValue value;
  switch (attr.type) {
    case AttrType::kFloat:
      value.number = static_cast<float>(attr.default_value);
      break;
    case AttrType::kInt:
    case AttrType::kBool:
      value.number = attr.default_value;
      break;
    case AttrType::kString:
      value.text = attr.default_text != nullptr ? attr.default_text : "";
      break;
    case AttrType::kFloats:
      break;
  }
  return value;
}

std::vector<AttrValue> OnnxDefaultValues(const OpSpec& spec) {
  std::vector<AttrValue> values;
  values.reserve(spec.attrs.size());
  for (const AttrSpec& attr : spec.attrs) values.push_back(OnnxDefaultValue(attr));
  return values;
}

}  // namespace opbridge
