// Framework-free rms_norm kernels over the last dimension of a [rows, cols]
// contiguous matrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct RmsNormAttrs {
  double eps;
};

// T is float, double, Float16 or BFloat16 (opbridge/half.h); 16-bit types
// compute in float32. Vectorized for the CPU's best SIMD target (opbridge/simd.h).
//
// y = x * rsqrt(mean(x^2) + eps) * weight (+ bias), row by row. bias may be
// null. Sums of squares accumulate in float32 lanes (float64 for double)
// over blocks of 1024 elements, and across blocks in double.
template <typename T>
void RmsNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                    const RmsNormAttrs& attrs, const ParallelFor& parallel_for);

// The forward of x + residual: sum = x + residual, rounded to T as an unfused
// add would be, is written out and normalized into y; x and residual are read
// from memory once (add_rms_norm).
template <typename T>
void RmsNormForwardOfSum(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                         int64_t rows, int64_t cols, const RmsNormAttrs& attrs,
                         const ParallelFor& parallel_for);

// Gradients of RmsNormForward. grad_bias may be null (bias absent or not
// needed); grad_weight and grad_bias hold cols elements. rstd is recomputed
// from x rather than saved, trading one extra read of x for no stored state;
// each row is read from memory once. Weight and bias gradients accumulate in
// double over fixed row chunks (a function of the shape only), so results do
// not depend on the thread count.
template <typename T>
void RmsNormBackward(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight, T* grad_bias,
                     int64_t rows, int64_t cols, const RmsNormAttrs& attrs, const ParallelFor& parallel_for);

// RmsNormBackward with grad_add (when not null: add_rms_norm's gradient of its
// sum output) added into grad_x.
template <typename T>
void RmsNormBackwardWithAdd(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x,
                            T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                            const RmsNormAttrs& attrs, const ParallelFor& parallel_for);

// The CUDA kernels (kernel.cu, built with OPBRIDGE_CUDA=ON) are the
// normalization kernels shared by the four norms (ops/shared/cuda_norms.cuh,
// which says what they compute), registered for the op.

}  // namespace opbridge
