#include "opbridge/runtime_checks.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "opbridge/checks.h"

namespace opbridge {

bool RuntimeChecksEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("OPBRIDGE_CHECK");
    return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

namespace {

template <typename T>
int64_t FirstNonFinite(const T* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) return i;
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

Status ValidateKernelArgs(const OpSpec& spec, const KernelArgs& args) {
  if (args.outputs.size() != spec.outputs.size() || args.output_infos.size() != spec.outputs.size()) {
    return Status::Error(spec.TorchName() + ": expected " + std::to_string(spec.outputs.size()) +
                         " outputs, the adapter made " + std::to_string(args.outputs.size()) +
                         " (OPBRIDGE_CHECK)");
  }
  for (size_t i = 0; i < args.inputs.size() && i < spec.inputs.size(); ++i) {
    const TensorInfo& info = args.input_infos[i];
    if (!info.present) continue;
    const char* name = spec.inputs[i].name;
    OPBRIDGE_RETURN_IF_ERROR(CheckBuffer(spec, name, args.inputs[i], info));
    const int64_t n = NumElements(info.shape);
    int64_t bad = -1;
    double value = 0.0;
    if (info.dtype == "float32") {
      const auto* data = static_cast<const float*>(args.inputs[i]);
      bad = FirstNonFinite(data, n);
      if (bad >= 0) value = data[bad];
    } else if (info.dtype == "float64") {
      const auto* data = static_cast<const double*>(args.inputs[i]);
      bad = FirstNonFinite(data, n);
      if (bad >= 0) value = data[bad];
    }
    if (bad >= 0) {
      return ArgError(spec, name,
                      std::string("contains ") + (std::isnan(value) ? "NaN" : "Inf") + " at flat index " +
                          std::to_string(bad) + " of shape " + FormatShape(info.shape) + " (OPBRIDGE_CHECK)");
    }
  }
  for (size_t k = 0; k < args.outputs.size(); ++k) {
    OPBRIDGE_RETURN_IF_ERROR(CheckBuffer(spec, spec.outputs[k], args.outputs[k], args.output_infos[k]));
  }
  return Status::Ok();
}

}  // namespace opbridge
