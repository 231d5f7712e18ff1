// What the PyTorch library's entry points (torch_library.cpp: the C call for
// C++ hosts, the table for the extension module) ask of the PyTorch adapter,
// with no torch types: registering the library's operators (for Python, when
// opbridge.load_library has checked that nothing of them is taken), and the
// output guards.
#pragma once

#include <string>
#include <vector>

namespace opbridge::torch_adapter {

// Registers every spec of this library with PyTorch (the op, its out= form
// and its backward, with their kernels; CUDA kernels in a CUDA build).
// Nothing happens when the library is loaded: opbridge.load_library calls
// this after its checks, a C++ host through opbridge_register_torch_operators. All or nothing: when PyTorch
// refuses one registration (an op of the same name exists), every registration made so far is undone and the
// error is raised. A second call does nothing.
void RegisterOperators();
bool OperatorsRegistered();

// The operators (and overloads: "ns::op.out") this library would register
// that PyTorch already knows; empty once this library has registered them.
std::vector<std::string> OperatorsTakenElsewhere();

// Output guards: every kernel output of this library (forward, out= form and
// backward) is allocated between guard bytes that are checked after the
// kernel, and the kernel call fails naming the op and the output when the
// kernel wrote outside the output or left its end unwritten (a shape rule
// that disagrees with the kernel). On under OPBRIDGE_CHECK=1, and while
// switched on here (opbridge.testing does, for its checks).
void SetOutputGuards(bool enabled);
bool OutputGuardsEnabled();

}  // namespace opbridge::torch_adapter
