#include "opbridge/checks.h"

#include <algorithm>

namespace opbridge {

std::string FormatShape(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += shape[i].ToString();
  }
  return text + "]";
}

Status ArgError(const OpSpec& spec, const char* argument, const std::string& detail) {
  return Status::Error(spec.MessageName() + ": argument '" + argument + "' " + detail);
}

Status CheckFloatingDtype(const OpSpec& spec, const char* argument, const std::string& given) {
  const Dtype dtype = DtypeFromName(given);
  if (dtype == Dtype::kFloat32 || dtype == Dtype::kFloat64) return Status::Ok();
  return ArgError(spec, argument, "must be float32 or float64, got " + given);
}

Status CheckFloatingOrHalfDtype(const OpSpec& spec, const char* argument, const std::string& given) {
  if (IsFloating(given)) return Status::Ok();
  return ArgError(spec, argument, "must be float32, float64, float16 or bfloat16, got " + given);
}

Status CheckAtLeast1d(const OpSpec& spec, const char* argument, const Shape& shape) {
  if (!shape.empty()) return Status::Ok();
  return ArgError(spec, argument, "must have at least 1 dimension, got a 0-d tensor");
}

namespace {
// The op's first input, which the checks compare the others with (named as
// the op names it: x, gate, ...).
const char* FirstInputName(const OpSpec& spec) { return spec.inputs.empty() ? "x" : spec.inputs[0].name; }
}  // namespace

Status CheckVectorOfLastDim(const OpSpec& spec, const char* argument, const Shape& shape,
                            const Shape& x_shape) {
  const Dim expected = x_shape.empty() ? Dim(-1) : x_shape.back();
  const bool rank_ok = shape.size() == 1;
  const bool size_ok = rank_ok && !DimsDiffer(shape[0], expected);
  if (size_ok) return Status::Ok();
  return ArgError(spec, argument,
                  "must be 1-D with " + expected.ToString() + " elements (the last dimension of " +
                      FirstInputName(spec) + "), got shape " + FormatShape(shape));
}

Status CheckSameDtype(const OpSpec& spec, const char* argument, const std::string& given,
                      const std::string& expected) {
  if (given == expected) return Status::Ok();
  return ArgError(
      spec, argument,
      std::string("must have the dtype of ") + FirstInputName(spec) + " (" + expected + "), got " + given);
}

Status CheckInputCount(const OpSpec& spec, const std::vector<TensorInfo>& inputs) {
  if (inputs.size() == spec.inputs.size()) return Status::Ok();
  return Status::Error(spec.MessageName() + ": expected " + std::to_string(spec.inputs.size()) +
                       " inputs, got " + std::to_string(inputs.size()));
}

Status CheckFloatingInputs(const OpSpec& spec, const std::vector<TensorInfo>& inputs) {
  OPBRIDGE_RETURN_IF_ERROR(CheckInputCount(spec, inputs));
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingDtype(spec, spec.inputs[0].name, inputs[0].dtype));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!inputs[i].present) continue;
    OPBRIDGE_RETURN_IF_ERROR(CheckSameDtype(spec, spec.inputs[i].name, inputs[i].dtype, inputs[0].dtype));
  }
  return Status::Ok();
}

Status CheckFloatingOrHalfInputs(const OpSpec& spec, const std::vector<TensorInfo>& inputs) {
  if (inputs.size() != spec.inputs.size()) return CheckFloatingInputs(spec, inputs);
  OPBRIDGE_RETURN_IF_ERROR(CheckFloatingOrHalfDtype(spec, spec.inputs[0].name, inputs[0].dtype));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!inputs[i].present) continue;
    OPBRIDGE_RETURN_IF_ERROR(CheckSameDtype(spec, spec.inputs[i].name, inputs[i].dtype, inputs[0].dtype));
  }
  return Status::Ok();
}

Status CheckOutputsTaken(const OpSpec& spec, const KernelArgs& args) {
  for (size_t k = 0; k < args.outputs.size(); ++k) {
    if (args.outputs.taken(k) || args.outputs.peek(k) == nullptr) continue;
    if (k < args.output_infos.size() && NumElements(args.output_infos[k].shape) == 0) continue;
    return Status::Error(spec.MessageName() + ": the kernel returned without writing output '" +
                         TensorName(spec, args, true, k) + "' (it never took KernelArgs::outputs[" +
                         std::to_string(k) +
                         "]), which would hold whatever its memory held; write every output the launch is "
                         "given (a null pointer marks one nobody needs)");
  }
  return Status::Ok();
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (const Dim& d : shape) n *= static_cast<int64_t>(d);
  return n;
}

Status CheckSameShape(const OpSpec& spec, const char* argument, const Shape& shape, const Shape& expected,
                      const char* expected_name) {
  bool same = shape.size() == expected.size();
  for (size_t i = 0; same && i < shape.size(); ++i) same = !DimsDiffer(shape[i], expected[i]);
  if (same) return Status::Ok();
  return ArgError(spec, argument,
                  std::string("must have the shape of ") + expected_name + " " + FormatShape(expected) +
                      ", got shape " + FormatShape(shape));
}

Status CheckRank(const OpSpec& spec, const char* argument, const Shape& shape, size_t rank,
                 const std::string& layout) {
  if (shape.size() == rank) return Status::Ok();
  return ArgError(spec, argument,
                  "must be " + std::to_string(rank) + "-D " + layout + ", got " +
                      std::to_string(shape.size()) + "-D shape " + FormatShape(shape));
}

std::string TensorName(const OpSpec& spec, const KernelArgs& args, bool output, size_t k) {
  const size_t inputs = args.inputs.size(), outputs = args.outputs.size();
  if (inputs == spec.inputs.size() && outputs == spec.outputs.size()) {
    return output ? spec.outputs[k] : spec.inputs[k].name;
  }
  const BackwardSpec& backward = spec.backward;
  if (inputs == backward.inputs.size() && outputs == backward.outputs.size()) {
    return output ? backward.outputs[k].name : backward.inputs[k].name;
  }
  return (output ? "output " : "input ") + std::to_string(k);
}

Status TensorAccessError(const OpSpec& spec, const KernelArgs& args, bool output, size_t k, const char* dtype,
                         int64_t elements, const char* how) {
  const size_t count = output ? args.outputs.size() : args.inputs.size();
  const size_t infos = output ? args.output_infos.size() : args.input_infos.size();
  const char* kind = output ? "output" : "input";
  if (k >= count || k >= infos) {
    return Status::Error(spec.MessageName() + ": the kernel takes " + kind + " " + std::to_string(k) +
                         ", but the call has " + std::to_string(std::min(count, infos)) + " " + kind + "s");
  }
  const TensorInfo& info = output ? args.output_infos[k] : args.input_infos[k];
  const int64_t given = NumElements(info.shape);
  const std::string name = TensorName(spec, args, output, k);
  const std::string given_text = info.dtype + " " + FormatShape(info.shape) + ", " + std::to_string(given) +
                                 (given == 1 ? " element" : " elements");
  const std::string taken = std::to_string(elements) + " " + dtype + (elements == 1 ? " value" : " values") +
                            (how == nullptr ? std::string() : std::string(" (") + how + ")");
  if (output) {
    return Status::Error(spec.MessageName() + ": output '" + name + "' is " + given_text +
                         " by the shape rule, but the kernel writes " + taken +
                         "; the shape rule and the kernel disagree");
  }
  return Status::Error(spec.MessageName() + ": input '" + name + "' is " + given_text +
                       ", but the kernel reads " + taken +
                       "; the shape rule lets through what the kernel cannot take");
}

}  // namespace opbridge
