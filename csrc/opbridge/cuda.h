// The CUDA side of an operator, with no CUDA or framework types in sight.
//
// The spec stays the one contract: an operator's kernel.cu (beside its CPU
// kernel.cpp) registers launch functions for that spec with
// OPBRIDGE_REGISTER_CUDA_KERNELS, and a CUDA build of the adapters finds them
// here. A launch function gets the same KernelArgs as the CPU one, except
// that pointers are device pointers, `stream` is set instead of
// `parallel_for`, and `scratch` hands out device memory. It enqueues its work
// on that stream and returns without synchronizing; it returns an error
// Status (never throws) for arguments it cannot run and for a failed launch.
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

struct CudaKernels {
  LaunchFn forward = nullptr;
  LaunchFn backward = nullptr;  // null when the op has no backward
};

// The CUDA kernels registered for `spec`, or null (a CPU-only build, or an op
// without CUDA kernels).
const CudaKernels* FindCudaKernels(const OpSpec& spec);

// Every op with CUDA kernels registered so far, in registration order.
std::vector<const OpSpec*> CudaSpecs();

// Calls `listener` for every CUDA registration made so far and every later
// one, whatever the order of static initialisation.
using CudaListener = void (*)(const OpSpec& spec, const CudaKernels& kernels);
void OnEachCudaKernels(CudaListener listener);

struct CudaRegistrar {
  CudaRegistrar(const OpSpec& spec, LaunchFn forward, LaunchFn backward);
};

}  // namespace opbridge

// Placed once in an operator's kernel.cu, at namespace scope:
//   OPBRIDGE_REGISTER_CUDA_KERNELS(mylib::kSoftCapSpec, LaunchSoftCapCuda, LaunchSoftCapBackwardCuda)
// (nullptr for the backward of an op without one).
#define OPBRIDGE_REGISTER_CUDA_KERNELS(spec, forward, backward)            \
  [[maybe_unused]] static const ::opbridge::CudaRegistrar OPBRIDGE_CONCAT( \
      opbridge_cuda_registrar_, __LINE__){spec, forward, backward};
