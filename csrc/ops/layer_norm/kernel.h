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
// y as LayerNormForward computes it (weight and bias may each be null), with
// the same two-step mean (the row mean, then the mean deviation from it) and
// biased variance.
template <typename T>
Status LayerNormForwardCuda(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                            const LayerNormAttrs& attrs, CudaStream stream);

// Bytes of device scratch memory LayerNormBackwardCuda needs for rows x cols
// (0 for an empty x).
template <typename T>
size_t LayerNormBackwardCudaScratchBytes(int64_t rows, int64_t cols);

// The gradients LayerNormBackward computes (without grad_add): weight may be
// null (ones); grad_weight and grad_bias may each be null when not needed.
// Mean and variance are recomputed from x. Weight and bias gradients are
// deterministic: per-chunk column sums (a fixed split of the rows, by shape
// alone) go to `scratch` (LayerNormBackwardCudaScratchBytes bytes, valid until
// the enqueued work is done) and are added in chunk order in double, with no
// atomics, so results do not depend on the device or on scheduling. rows == 0
// zero-fills the gradients requested.
template <typename T>
Status LayerNormBackwardCuda(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight,
                             T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                             void* scratch, CudaStream stream);

}  // namespace opbridge
