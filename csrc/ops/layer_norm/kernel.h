// Framework-free layer_norm kernels over the last dimension of a [rows, cols]
// contiguous matrix. add_layer_norm runs on the same row kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct LayerNormAttrs {
  double eps;
};

// T is float, double, Float16 or BFloat16 (opbridge/half.h); 16-bit types
// compute in float32. Vectorized for the CPU's best SIMD target (opbridge/simd.h).
//
// y = (x - mean) / sqrt(var + eps) (* weight) (+ bias), row by row, with the
// biased variance; weight and bias may each be null. Mean and variance take
// two passes over the row (the second from cache): sums accumulate in
// float32 lanes (float64 for double) over blocks of 1024 elements, and
// across blocks in double.
template <typename T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                      const LayerNormAttrs& attrs, const ParallelFor& parallel_for);

// The forward of x + residual: sum = x + residual, rounded to T as an unfused
// add would be, is written out and normalized into y, each row read from
// memory once (add_layer_norm).
template <typename T>
void LayerNormForwardOfSum(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                           int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                           const ParallelFor& parallel_for);

// Gradients of LayerNormForward: grad_x = d(sum(grad_y * y))/dx (+ grad_add
// when not null: add_layer_norm's gradient of its second output), and the
// weight and bias gradients. weight may be null (taken as ones); grad_weight
// and grad_bias (cols elements) may be null when not needed. Mean and
// variance are recomputed from x; each row is read from memory once. Weight
// and bias gradients accumulate in double over fixed row chunks (a function
// of the shape only), so results do not depend on the thread count.
template <typename T>
void LayerNormBackward(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x,
                       T* grad_weight, T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                       const ParallelFor& parallel_for);

// The CUDA kernels (kernel.cu, built with OPBRIDGE_CUDA=ON) are the
// normalization kernels shared by the four norms (ops/shared/cuda_norms.cuh,
// which says what they compute), registered for the op.

}  // namespace opbridge
