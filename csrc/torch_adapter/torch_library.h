// The C entry point of an operator library's PyTorch library,
// lib<name>_torch.so (opbridge_add_operator_library's torch adapter): the
// library's operators, their CPU/Meta/Autograd kernels and backward, with no
// Python in it (they lie in lib<name>_torch_kernels.so, which it needs).
// Loading it registers its operators, as with any PyTorch extension library
// (torch.ops.load_library, dlopen, linking it); an error is written to stderr
// and registers nothing. A C++ host that wants the error as a value calls
// this (again: it does nothing once they are registered):
//
//   #include "torch_adapter/torch_library.h"
//   if (const char* error = opbridge_register_torch_operators()) { ...report error... }
//
// A host that uses several operator libraries dlopen()s each and calls the
// function found with dlsym() on that library's handle (each library exports
// the same name). Python registers through opbridge.load_library instead,
// which checks first that the library's namespace and operators are free
// (its extension module loads the kernels library, not this one).
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
