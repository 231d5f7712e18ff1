// Framework-free add_layer_norm kernels over the last dimension of
// [rows, cols] contiguous matrices, on layer_norm's row kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct AddLayerNormAttrs {
  double eps;
};

// T is float, double, Float16 or BFloat16 (16-bit types compute in float32).
// residual_out = x + residual (rounded to T, as an unfused add would be);
// out = (residual_out - mean) / sqrt(var + eps) (* weight) (+ bias) over each
// row, biased variance. weight and bias may each be null. Each row of x and
// residual is read from memory once.
template <typename T>
void AddLayerNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                         T* residual_out, int64_t rows, int64_t cols, const AddLayerNormAttrs& attrs,
                         const ParallelFor& parallel_for);

// Gradients from the saved residual_out. grad_sum (the gradient of both x and
// residual) = layer_norm's input gradient + grad_residual_out (which may be
// null). weight may be null (ones); grad_weight and grad_bias may be null when
// not needed. Weight and bias gradients are reduced over a fixed,
// shape-determined split of the rows, so results do not depend on the
// parallelism.
template <typename T>
void AddLayerNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                          const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                          int64_t cols, const AddLayerNormAttrs& attrs, const ParallelFor& parallel_for);

// The CUDA kernels (kernel.cu, built with OPBRIDGE_CUDA=ON) are the
// normalization kernels shared by the four norms (ops/shared/cuda_norms.cuh,
// which says what they compute), registered for the op.

}  // namespace opbridge
