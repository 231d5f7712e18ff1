// Framework-free add_rms_norm kernels over the last dimension of [rows, cols]
// contiguous matrices.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct AddRmsNormAttrs {
  double eps;
};

// T is float, double, Float16 or BFloat16 (opbridge/half.h); 16-bit types
// compute in float32. Vectorized for the CPU's best SIMD target
// (opbridge/simd.h).
//
// residual_out = x + residual (rounded to T, as an unfused add would be);
// out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight (+ bias).
// bias may be null. x and residual are read from memory once; sums of
// squares accumulate in float32 lanes (float64 for double) over blocks of
// 1024 elements, and across blocks in double.
template <typename T>
void AddRmsNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out, T* residual_out,
                       int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                       const ParallelFor& parallel_for);

// Gradients from the saved residual_out. grad_sum (the gradient of both x and
// residual) = rms_norm's input gradient + grad_residual_out; grad_residual_out
// and grad_bias may be null. Weight and bias gradients are reduced over a
// fixed, shape-determined split of the rows, so results do not depend on the
// parallelism.
template <typename T>
void AddRmsNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight,
                        T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                        const AddRmsNormAttrs& attrs, const ParallelFor& parallel_for);

// The CUDA kernels (kernel.cu, built with OPBRIDGE_CUDA=ON) are the
// normalization kernels shared by the four norms (ops/shared/cuda_norms.cuh,
// which says what they compute), registered for the op.

}  // namespace opbridge
