// The exported entry points of lib<name>_torch_kernels.so (exports.map): the
// C registration call (torch_library.h; lib<name>_torch.so, which registers
// when loaded, calls it) and the table the Python extension module reads
// (interface.h).
#include "torch_adapter/torch_library.h"

#include <exception>
#include <string>

#include "opbridge/cuda.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/simd.h"
#include "torch_adapter/backward_rule.h"
#include "torch_adapter/interface.h"
#include "torch_adapter/registration.h"

#define OPBRIDGE_EXPORT __attribute__((visibility("default")))

extern "C" OPBRIDGE_EXPORT const char* opbridge_register_torch_operators(void) {
  thread_local std::string error;
  try {
    opbridge::torch_adapter::RegisterOperators();
    return nullptr;
  } catch (const std::exception& caught) {
    error = std::string(opbridge::ThisLibrary().name) +
            ": registering its operators with PyTorch failed: " + caught.what();
  } catch (...) {
    error = std::string(opbridge::ThisLibrary().name) + ": registering its operators with PyTorch failed";
  }
  return error.c_str();
}

namespace {

namespace adapter = opbridge::torch_adapter;

const adapter::Interface kInterface{
    adapter::kInterfaceVersion,
    static_cast<bool>(_GLIBCXX_USE_CXX11_ABI),
    &opbridge::ThisLibrary,
    &opbridge::RuntimeChecksEnabled,
    &opbridge::AllSpecs,
    &opbridge::FindSpec,
    [](const opbridge::OpSpec& spec) { return spec.TorchSchema(); },
    [](const opbridge::OpSpec& spec) { return spec.BackwardSchema(); },
    &opbridge::AttrTypeName,
    [](const opbridge::OpSpec& spec) { return opbridge::FindCudaKernels(spec) != nullptr; },
    &opbridge::InferWithAttrs,
    &adapter::InferBackwardWithAttrs,
    &opbridge::SimdTargets,
    &opbridge::SimdTarget,
    &opbridge::SimdDefaultTarget,
    &opbridge::SetSimdTarget,
    &adapter::RegisterOperators,
    &adapter::OperatorsRegistered,
    &adapter::OperatorsTakenElsewhere,
    &adapter::SetOutputGuards,
    &adapter::OutputGuardsEnabled,
    [](opbridge::DimSymbols* symbols) {
      opbridge::DimSymbols* previous = opbridge::CurrentDimSymbols();
      opbridge::CurrentDimSymbols() = symbols;
      return previous;
    },
};

}  // namespace

extern "C" OPBRIDGE_EXPORT const adapter::Interface* opbridge_torch_adapter_interface(uint32_t version) {
  return version == adapter::kInterfaceVersion ? &kInterface : nullptr;
}
