#include "opbridge/runtime_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

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

// Whether a non-finite value is in `allowed` (a ValueSet).
bool Allowed(double v, unsigned allowed) {
  if (std::isnan(v)) return (allowed & kNaNValues) != 0;
  return (allowed & (v < 0 ? kNegInfValues : kPosInfValues)) != 0;
}

// The first element that is NaN or infinite and not in `allowed` (-1 when
// none) and its value.
template <typename T>
int64_t FirstNonFinite(const void* buffer, int64_t n, unsigned allowed, double* value) {
  const T* data = static_cast<const T*>(buffer);
  for (int64_t i = 0; i < n; ++i) {
    const double v = AsDouble(data[i]);
    if (!std::isfinite(v) && !Allowed(v, allowed)) {
      *value = v;
      return i;
    }
  }
  return -1;
}

const char* ValueName(double v) {
  if (std::isnan(v)) return "NaN";
  return v < 0 ? "-Inf" : "Inf";
}

// What `allowed` (a ValueSet) admits, for the message: "finite values", "finite values and -inf", ...
std::string ValuesText(unsigned allowed) {
  std::string text = "finite values";
  if ((allowed & kInfValues) == kInfValues) {
    text += ", -inf and +inf";
  } else if (allowed & kNegInfValues) {
    text += ", -inf";
  } else if (allowed & kPosInfValues) {
    text += ", +inf";
  }
  if (allowed & kNaNValues) text += ", NaN";
  return text;
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
  const unsigned allowed = spec.AllowedValues(argument);
  switch (DtypeFromName(info.dtype)) {
    case Dtype::kFloat32:
      bad = FirstNonFinite<float>(data, n, allowed, &value);
      break;
    case Dtype::kFloat64:
      bad = FirstNonFinite<double>(data, n, allowed, &value);
      break;
    case Dtype::kFloat16:
      bad = FirstNonFinite<Float16>(data, n, allowed, &value);
      break;
    case Dtype::kBFloat16:
      bad = FirstNonFinite<BFloat16>(data, n, allowed, &value);
      break;
    default:
      break;
  }
  if (bad < 0) return Status::Ok();
  return ArgError(spec, argument,
                  std::string("contains ") + ValueName(value) + " at flat index " + std::to_string(bad) +
                      " of " + info.dtype + " shape " + FormatShape(info.shape) + "; it takes " +
                      ValuesText(allowed) + " (OPBRIDGE_CHECK; a spec declares more with .Values(\"" +
                      argument + "\", ...))");
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

unsigned char GuardByte(int64_t position) {
  return static_cast<unsigned char>((position * 0x9D + 0x5B) & 0xFF);
}

// The first or last byte of buffer[begin, end) that differs from the pattern
// (-1: none).
int64_t FirstChanged(const unsigned char* buffer, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    if (buffer[i] != GuardByte(i)) return i;
  }
  return -1;
}

int64_t LastChanged(const unsigned char* buffer, int64_t begin, int64_t end) {
  for (int64_t i = end - 1; i >= begin; --i) {
    if (buffer[i] != GuardByte(i)) return i;
  }
  return -1;
}

std::string Bytes(int64_t count) { return std::to_string(count) + (count == 1 ? " byte" : " bytes"); }

// ", as many as input 'x' (float32 [4, 8])" for each input of exactly
// `bytes` bytes: the likely size the kernel wrote.
std::string InputsOfSize(int64_t bytes, const std::vector<const char*>& names,
                         const std::vector<TensorInfo>& inputs) {
  std::string hint;
  for (size_t i = 0; i < inputs.size() && i < names.size() && bytes > 0; ++i) {
    const TensorInfo& input = inputs[i];
    if (!input.present || NumElements(input.shape) * DtypeSize(input.dtype) != bytes) continue;
    hint += hint.empty() ? ", as many as " : " or ";
    hint += "input '" + std::string(names[i]) + "' (" + input.dtype + " " + FormatShape(input.shape) + ")";
  }
  return hint;
}

}  // namespace

int64_t OutputTailGuard(const std::vector<TensorInfo>& inputs) {
  int64_t elements = 0;
  for (const TensorInfo& input : inputs) {
    if (input.present) elements += NumElements(input.shape);
  }
  return std::max<int64_t>(4096, (elements * 8 + 63) / 64 * 64);
}

void FillGuardPattern(unsigned char* buffer, int64_t size) {
  for (int64_t i = 0; i < size; ++i) buffer[i] = GuardByte(i);
}

Status CheckOutputGuards(const std::string& op, const char* output, const TensorInfo& info,
                         const unsigned char* buffer, int64_t tail_guard,
                         const std::vector<const char*>& input_names, const std::vector<TensorInfo>& inputs) {
  const int64_t size = NumElements(info.shape) * DtypeSize(info.dtype);
  const int64_t end = kOutputHeadGuard + size;
  const std::string declared =
      "its shape rule gives " + info.dtype + " " + FormatShape(info.shape) + " (" + Bytes(size) + ")";
  const std::string advice =
      "; the shape rule and the kernel disagree on the output's shape or dtype (output guards)";
  const std::string where = op + ": the kernel ";
  const int64_t before = FirstChanged(buffer, 0, kOutputHeadGuard);
  if (before >= 0) {
    return Status::Error(where + "wrote before the start of output '" + output + "' (" +
                         Bytes(kOutputHeadGuard - before) + " before it); " + declared + advice);
  }
  const int64_t past = LastChanged(buffer, end, end + tail_guard);
  if (past >= 0) {
    const int64_t written = past + 1 - kOutputHeadGuard;
    const bool beyond = past == end + tail_guard - 1;
    return Status::Error(where + "wrote past the end of output '" + output + "': " + declared +
                         ", the kernel wrote " + (beyond ? "more than " : "") + Bytes(written) + " (" +
                         Bytes(written - size) + " past its end" +
                         (beyond ? ", beyond the guard: memory after it may be damaged" : "") + ")" +
                         InputsOfSize(written, input_names, inputs) + advice);
  }
  // The last bytes of the output unchanged: the kernel stopped short.
  const int64_t checked = std::min<int64_t>(size, 8);
  if (checked > 0 && FirstChanged(buffer, end - checked, end) < 0) {
    const int64_t written =
        std::max<int64_t>(LastChanged(buffer, kOutputHeadGuard, end) + 1 - kOutputHeadGuard, 0);
    return Status::Error(where + "left the end of output '" + output + "' unwritten: " + declared +
                         ", the kernel wrote " +
                         (written == 0 ? "none of them" : "only the first " + Bytes(written)) +
                         InputsOfSize(written, input_names, inputs) + advice);
  }
  return Status::Ok();
}

HostOutputGuards::HostOutputGuards(std::string op, std::vector<const char*> input_names,
                                   std::vector<TensorInfo> inputs)
    : op_(std::move(op)),
      input_names_(std::move(input_names)),
      inputs_(std::move(inputs)),
      tail_(OutputTailGuard(inputs_)) {}

void* HostOutputGuards::Add(const char* name, const TensorInfo& info) {
  Output output{name, info, NumElements(info.shape) * DtypeSize(info.dtype), {}};
  output.bytes.resize(static_cast<size_t>(kOutputHeadGuard + output.size + tail_));
  FillGuardPattern(output.bytes.data(), static_cast<int64_t>(output.bytes.size()));
  outputs_.push_back(std::move(output));
  return outputs_.back().bytes.data() + kOutputHeadGuard;
}

Status HostOutputGuards::Check() const {
  for (const Output& output : outputs_) {
    OPBRIDGE_RETURN_IF_ERROR(
        CheckOutputGuards(op_, output.name, output.info, output.bytes.data(), tail_, input_names_, inputs_));
  }
  return Status::Ok();
}

Status LaunchCheckedOnHost(const OpSpec& spec, const std::string& op, const KernelArgs& args,
                           const std::function<Status(const KernelArgs&)>& launch) {
  OPBRIDGE_RETURN_IF_ERROR(ValidateKernelArgs(spec, args));
  std::vector<const char*> names;
  for (const InputSpec& input : spec.inputs) names.push_back(input.name);
  HostOutputGuards guards(op, names, args.input_infos);
  KernelArgs guarded = args;
  for (size_t k = 0; k < args.outputs.size(); ++k) {
    guarded.outputs[k] = guards.Add(spec.outputs[k], args.output_infos[k]);
  }
  OPBRIDGE_RETURN_IF_ERROR(LaunchChecked(spec, launch, guarded));
  OPBRIDGE_RETURN_IF_ERROR(guards.Check());
  for (size_t k = 0; k < args.outputs.size(); ++k) {
    if (guards.Size(k) > 0) std::memcpy(args.outputs[k], guards.Data(k), static_cast<size_t>(guards.Size(k)));
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
