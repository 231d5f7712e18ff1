// lib<name>_torch.so: what a host loads to get an operator library's PyTorch
// operators, as it loads any PyTorch extension library (torch.ops.load_library,
// dlopen, linking it): loading it registers them. The kernels and the
// registrations live in lib<name>_torch_kernels.so, which this library needs;
// opbridge's extension module loads that one directly, so that
// opbridge.load_library checks the library's namespace and operators before
// anything is registered. No torch symbol is used here: the same file serves
// either ABI.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "torch_adapter/torch_library.h"

#ifndef OPBRIDGE_TORCH_KERNELS_FILE
#error "the build names the kernels library (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif

#define OPBRIDGE_EXPORT __attribute__((visibility("default")))

namespace {

using Register = const char* (*)();

// The registration of this library's own kernels library, found through its
// handle: with several operator libraries in one process (each exports the
// same name), each of these reaches its own.
const char* RegisterKernels() {
  void* handle = dlopen(OPBRIDGE_TORCH_KERNELS_FILE, RTLD_NOW | RTLD_NOLOAD);
  const auto call = handle != nullptr
                        ? reinterpret_cast<Register>(dlsym(handle, "opbridge_register_torch_operators"))
                        : nullptr;
  if (call == nullptr) {
    thread_local std::string error;
    error = "opbridge: " OPBRIDGE_TORCH_KERNELS_FILE " (the kernels of this PyTorch library) is not loaded";
    return error.c_str();
  }
  return call();
}

// At load: an error (an operator of the same name is already registered)
// registers nothing and is written to stderr, as the loader cannot return
// it; opbridge_register_torch_operators() returns it again.
__attribute__((constructor)) void RegisterOnLoad() {
  if (const char* error = RegisterKernels()) std::fprintf(stderr, "%s\n", error);
}

}  // namespace

extern "C" OPBRIDGE_EXPORT const char* opbridge_register_torch_operators(void) { return RegisterKernels(); }
