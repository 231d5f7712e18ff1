#include "opbridge/runtime_checks.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "opbridge/checks.h"
#include "opbridge/half.h"

namespace opbridge {

bool RuntimeChecksEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("OPBRIDGE_CHECK");
    return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

namespace {

double AsDouble(float value) { return value; }
double AsDouble(double value) { return value; }
double AsDouble(Float16 value) { return ToFloat(value); }
double AsDouble(BFloat16 value) { return ToFloat(value); }

// The first element that is NaN or infinite (-1 when none) and its value.
template <typename T>
int64_t FirstNonFinite(const void* buffer, int64_t n, double* value) {
  const T* data = static_cast<const T*>(buffer);
  for (int64_t i = 0; i < n; ++i) {
    const double v = AsDouble(data[i]);
    if (!std::isfinite(v)) {
      *value = v;
      return i;
    }
  }
  return -1;
}

Status CheckBuffer(const OpSpec& spec, const char* argument, const void* data, const TensorInfo& info) {
  for (int64_t d : info.shape) {
    if (d < 0) return ArgError(spec, argument, "has a negative dimension: " + FormatShape(info.shape));
  }
  if (data == nullptr && NumElements(info.shape) > 0) {
    return ArgError(spec, argument, "has no data for shape " + FormatShape(info.shape) + " (OPBRIDGE_CHECK)");
  }
  return Status::Ok();
}

}  // namespace

Status CheckFiniteTensor(const OpSpec& spec, const char* argument, const TensorInfo& info, const void* data) {
  OPBRIDGE_RETURN_IF_ERROR(CheckBuffer(spec, argument, data, info));
  const int64_t n = NumElements(info.shape);
  if (n == 0) return Status::Ok();
  int64_t bad = -1;
  double value = 0.0;
  if (info.dtype == "float32") {
    bad = FirstNonFinite<float>(data, n, &value);
  } else if (info.dtype == "float64") {
    bad = FirstNonFinite<double>(data, n, &value);
  } else if (info.dtype == "float16") {
    bad = FirstNonFinite<Float16>(data, n, &value);
  } else if (info.dtype == "bfloat16") {
    bad = FirstNonFinite<BFloat16>(data, n, &value);
  }
  if (bad < 0) return Status::Ok();
  return ArgError(spec, argument,
                  std::string("contains ") + (std::isnan(value) ? "NaN" : "Inf") + " at flat index " +
                      std::to_string(bad) + " of " + info.dtype + " shape " + FormatShape(info.shape) +
                      " (OPBRIDGE_CHECK)");
}

Status CheckAttributeValue(const OpSpec& spec, const char* argument, const AttrValue& value) {
  if (std::isnan(value.number)) {
    return ArgError(spec, argument, "is NaN (OPBRIDGE_CHECK)");
  }
  for (size_t i = 0; i < value.numbers.size(); ++i) {
    if (std::isnan(value.numbers[i])) {
      return ArgError(spec, argument,
                      "has NaN at index " + std::to_string(i) + " of " +
                          std::to_string(value.numbers.size()) + " values (OPBRIDGE_CHECK)");
    }
  }
  return Status::Ok();
}

Status ValidateKernelArgs(const OpSpec& spec, const KernelArgs& args) {
  if (args.outputs.size() != spec.outputs.size() || args.output_infos.size() != spec.outputs.size()) {
    return Status::Error(spec.TorchName() + ": expected " + std::to_string(spec.outputs.size()) +
                         " outputs, the adapter made " + std::to_string(args.outputs.size()) +
                         " (OPBRIDGE_CHECK)");
  }
  for (size_t i = 0; i < args.inputs.size() && i < spec.inputs.size(); ++i) {
    const TensorInfo& info = args.input_infos[i];
    if (!info.present) continue;
    OPBRIDGE_RETURN_IF_ERROR(CheckFiniteTensor(spec, spec.inputs[i].name, info, args.inputs[i]));
  }
  for (size_t a = 0; a < args.attrs.size() && a < spec.attrs.size(); ++a) {
    OPBRIDGE_RETURN_IF_ERROR(CheckAttributeValue(spec, spec.attrs[a].name, args.attrs[a]));
  }
  for (size_t k = 0; k < args.outputs.size(); ++k) {
    OPBRIDGE_RETURN_IF_ERROR(CheckBuffer(spec, spec.outputs[k], args.outputs[k], args.output_infos[k]));
  }
  return Status::Ok();
}

namespace {

void AppendHexByte(unsigned char byte, std::string* out) {
  static const char kDigits[] = "0123456789abcdef";
  *out += "\\x";
  *out += kDigits[byte >> 4];
  *out += kDigits[byte & 0xF];
}

}  // namespace

std::string QuotedForMessage(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte >= 0x7F) {
      AppendHexByte(byte, &out);
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string WithoutControlBytes(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      AppendHexByte(byte, &out);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace opbridge
