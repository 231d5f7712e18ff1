// The PyTorch adapter: registers every operator spec of this library with
// PyTorch — the op and its backward (schemas generated from the spec), CPU and
// Meta kernels for both, and one generic Autograd kernel — with no per-op
// code. Linking this adapter into a library is all it takes: each spec
// registered with OPBRIDGE_REGISTER_SPEC becomes torch.ops.<namespace>.<name>
// when opbridge.load_library registers the library (registration.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "opbridge/spec.h"

namespace opbridge::torch_adapter {

std::string DtypeName(at::ScalarType type);

// Shape and dtype as the spec's shape rule sees them; symbolic sizes (under
// torch.compile or torch.export) become -1.
TensorInfo InfoOf(const std::optional<at::Tensor>& tensor);

// at::parallel_for: torch's intra-op pool.
ParallelFor TorchParallelFor();

// Raises a RuntimeError carrying the status message (TORCH_CHECK).
void ThrowIfError(const Status& status);

}  // namespace opbridge::torch_adapter
