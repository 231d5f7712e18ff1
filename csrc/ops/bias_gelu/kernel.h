// Framework-free bias_gelu kernels over [rows, cols] contiguous matrices.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct BiasGeluAttrs {
  bool use_tanh;  // false: 0.5 v (1 + erf(v / sqrt(2))); true: the tanh form
};

// T is float, double, Float16 or BFloat16 (opbridge/half.h); 16-bit types
// compute in float32. Vectorized for the CPU's best SIMD target
// (opbridge/simd.h); float64 in float64 lanes.
//
// y = gelu(x + bias), bias broadcast over rows.
template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for);

// grad_x = grad_y * gelu'(x + bias); grad_bias (cols elements, may be null) is
// grad_x summed over rows in a fixed, shape-determined order (float32 over
// runs of 8 rows, double beyond), so results do not depend on the
// parallelism.
template <typename T>
void BiasGeluBackward(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                      int64_t cols, const BiasGeluAttrs& attrs, const ParallelFor& parallel_for);

// CUDA kernels (kernel.cu), same math with CUDA's erff / tanhf / expf (erf /
// tanh / exp for float64): pointers are device pointers, the work is
// enqueued on `stream` without synchronizing. The backward's grad_bias (may
// be null) is a deterministic two-stage column sum: float32 (float64)
// partial sums of fixed row chunks go to `scratch`, at least
// BiasGeluBackwardCudaScratchBytes<T>(rows, cols) bytes of device memory
// (unused when grad_bias is null), then are added in chunk order.
template <typename T>
Status BiasGeluForwardCuda(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                           const BiasGeluAttrs& attrs, CudaStream stream);
template <typename T>
size_t BiasGeluBackwardCudaScratchBytes(int64_t rows, int64_t cols);
template <typename T>
Status BiasGeluBackwardCuda(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                            int64_t cols, const BiasGeluAttrs& attrs, void* scratch, CudaStream stream);

}  // namespace opbridge
