// Helpers shared by every operator's PyTorch binding (ops/*/torch_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "core/spec.h"

namespace opbridge::torch_adapter {

std::string DtypeName(at::ScalarType type);

// Shape and dtype as the spec's shape rule sees them; symbolic sizes (under
// torch.compile or torch.export) become -1.
TensorInfo InfoOf(const std::optional<at::Tensor>& tensor);

ParallelFor TorchParallelFor();

// Raises a RuntimeError carrying the status message (TORCH_CHECK).
void ThrowIfError(const Status& status);

// Defines the op and its backward in the opbridge namespace from the spec.
void DefineOp(torch::Library& library, const OpSpec& spec);

// CPU forward: checks with the spec's shape rule, makes inputs contiguous,
// allocates the outputs and runs the spec's kernel.
std::vector<at::Tensor> RunForward(const OpSpec& spec, const std::vector<std::optional<at::Tensor>>& inputs,
                                   const std::vector<AttrValue>& attrs);

// Meta / fake forward: same checks, outputs of the inferred shape (symbolic
// sizes are kept where an output has an input's shape), nothing computed.
std::vector<at::Tensor> MetaForward(const OpSpec& spec, const std::vector<std::optional<at::Tensor>>& inputs);
// The same, checked with the attributes (for specs with infer_attrs).
std::vector<at::Tensor> MetaForward(const OpSpec& spec, const std::vector<std::optional<at::Tensor>>& inputs,
                                    const std::vector<AttrValue>& attrs);

// The error format used across the adapters for backward-only arguments.
[[noreturn]] void FailArgument(const OpSpec& spec, const char* argument, const std::string& detail);

}  // namespace opbridge::torch_adapter
