// What an operator library's PyTorch library (lib<name>_torch.so) gives its
// Python extension module (module.cpp): the library's identity, specs, shape
// rules, SIMD dispatch and the registration entry points, as one table the
// module finds with dlsym() on the library it dlopen()ed from beside itself.
// Both are built together from the same sources by
// opbridge_add_operator_library, so the table passes C++ types; its version
// guards against a module beside another build's library. Looking it up on
// the library's handle (not by linking) keeps two operator libraries in one
// process apart: each module reaches its own library even where another
// library with the same exported names is loaded globally.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opbridge/library.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge::torch_adapter {

inline constexpr uint32_t kInterfaceVersion = 3;

struct Interface {
  uint32_t version;  // kInterfaceVersion of the library's build
  bool cxx11_abi;    // _GLIBCXX_USE_CXX11_ABI of the library's build (std::string's layout)
  const LibraryInfo& (*this_library)();
  bool (*runtime_checks_enabled)();
  std::vector<const OpSpec*> (*all_specs)();
  const OpSpec* (*find_spec)(const std::string& name);
  std::string (*torch_schema)(const OpSpec& spec);
  std::string (*backward_schema)(const OpSpec& spec);
  const char* (*attr_type_name)(AttrType type);
  bool (*has_cuda_kernels)(const OpSpec& spec);
  Status (*infer_with_attrs)(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                             const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs);
  // backward_rule.h: the backward's output shapes and dtypes.
  Status (*infer_backward)(const OpSpec& spec, const std::vector<TensorInfo>& inputs,
                           const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs);
  std::vector<std::string> (*simd_targets)();
  std::string (*simd_target)();
  std::string (*simd_default_target)();
  Status (*set_simd_target)(const std::string& name);
  // registration.h; register_operators throws what PyTorch raised.
  void (*register_operators)();
  bool (*operators_registered)();
  std::vector<std::string> (*operators_taken_elsewhere)();
  void (*set_output_guards)(bool enabled);
  bool (*output_guards_enabled)();
  // The symbolic sizes the library's shape rules see on this thread (the
  // module's, for the fake kernels of a stable-ABI library); the previous.
  DimSymbols* (*set_dim_symbols)(DimSymbols* symbols);
};

}  // namespace opbridge::torch_adapter

// The table, or null when `version` is not this build's kInterfaceVersion.
extern "C" const opbridge::torch_adapter::Interface* opbridge_torch_adapter_interface(uint32_t version);
