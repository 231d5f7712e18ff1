// Framework-free scaled_clamp kernels: y = clamp(x * scale, min_val, max_val).
#pragma once

#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct ScaledClampAttrs {
  double scale;
  double min_val;
  double max_val;
};

// x and y hold n contiguous elements; T is float, double, Float16 or
// BFloat16 (16-bit types compute in float32). One vectorized pass. NaN
// propagates as in torch.clamp.
template <typename T>
void ScaledClampForward(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs,
                        const ParallelFor& parallel_for);

// grad_x = grad_y * scale where min_val <= x * scale <= max_val, else 0
// (torch.clamp's inclusive rule).
template <typename T>
void ScaledClampBackward(const T* grad_y, const T* x, T* grad_x, int64_t n, const ScaledClampAttrs& attrs,
                         const ParallelFor& parallel_for);

// CUDA kernels (kernel.cu), same math: x, y, grad_y and grad_x are device
// pointers; the work is enqueued on `stream` (one vectorized pass, no
// synchronization). 16-bit types compute in float32.
template <typename T>
Status ScaledClampForwardCuda(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs, CudaStream stream);
template <typename T>
Status ScaledClampBackwardCuda(const T* grad_y, const T* x, T* grad_x, int64_t n,
                               const ScaledClampAttrs& attrs, CudaStream stream);

}  // namespace opbridge
