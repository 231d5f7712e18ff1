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

// CUDA kernels (kernel.cu, built with OPBRIDGE_CUDA=ON). Pointers are
// device pointers on the current device, contiguous, and outputs do not
// overlap inputs; the work is enqueued on `stream` without synchronizing, and
// a failed launch comes back as an error Status. T as above: 16-bit types
// load into float32, compute and accumulate in float32 and round to nearest
// even on store; float32 computes in float32, double in double (row sums
// stay in that type, where the CPU kernels move them to double every 1024
// elements). Each input row is read from memory once for rows up to 8192
// elements (4096 for double; half that with unaligned pointers or cols not a
// multiple of 16 bytes), from the cache after the first tile beyond that.
//
// residual_out and out as AddLayerNormForward computes them (weight and bias
// may each be null): residual_out, rounded to T, is what is normalized.
template <typename T>
Status AddLayerNormForwardCuda(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                               T* residual_out, int64_t rows, int64_t cols, const AddLayerNormAttrs& attrs,
                               CudaStream stream);

// Bytes of device scratch memory AddLayerNormBackwardCuda needs for rows x
// cols (0 for an empty tensor).
template <typename T>
size_t AddLayerNormBackwardCudaScratchBytes(int64_t rows, int64_t cols);

// The gradients AddLayerNormBackward computes from residual_out:
// grad_residual_out may be null, weight may be null (ones), grad_weight and
// grad_bias may each be null when not needed. Weight and bias gradients are
// deterministic: per-chunk column sums (a fixed split of the rows, by shape
// alone) go to `scratch` (AddLayerNormBackwardCudaScratchBytes bytes, valid
// until the enqueued work is done) and are added in chunk order in double,
// with no atomics, so results do not depend on the device or on scheduling.
// rows == 0 zero-fills the gradients requested.
template <typename T>
Status AddLayerNormBackwardCuda(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                                const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                                int64_t cols, const AddLayerNormAttrs& attrs, void* scratch,
                                CudaStream stream);

}  // namespace opbridge
