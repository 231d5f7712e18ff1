// The C entry point of an operator library's PyTorch library,
// lib<name>_torch.so (opbridge_add_operator_library's torch adapter): the
// library's operators, their CPU/Meta/Autograd kernels and backward, with no
// Python in it. Loading it registers nothing; a C++ host that links libtorch
// (an AOTInductor model package, a TorchScript runtime) calls this once,
// before it runs anything that uses the operators:
//
//   #include "torch_adapter/torch_library.h"
//   if (const char* error = opbridge_register_torch_operators()) { ...report error... }
//
// A host that uses several operator libraries dlopen()s each and calls the
// function found with dlsym() on that library's handle (each library exports
// the same name). Python registers through opbridge.load_library instead,
// which checks first that the library's namespace and operators are free.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Registers every operator of this library with PyTorch's dispatcher (all or
// nothing; a second call does nothing). Returns NULL when they are
// registered, else what went wrong (an operator of the same name exists),
// valid until the next call on the same thread.
const char* opbridge_register_torch_operators(void);

#ifdef __cplusplus
}
#endif
