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
// residual_out and out as AddRmsNormForward computes them (weight is
// required, bias may be null): residual_out, rounded to T, is what is
// normalized.
template <typename T>
Status AddRmsNormForwardCuda(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                             T* residual_out, int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                             CudaStream stream);

// Bytes of device scratch memory AddRmsNormBackwardCuda needs for rows x
// cols (0 for an empty tensor).
template <typename T>
size_t AddRmsNormBackwardCudaScratchBytes(int64_t rows, int64_t cols);

// The gradients AddRmsNormBackward computes from residual_out;
// grad_residual_out and grad_bias may be null. Weight and bias gradients are
// deterministic: per-chunk column sums (a fixed split of the rows, by shape
// alone) go to `scratch` (AddRmsNormBackwardCudaScratchBytes bytes, valid
// until the enqueued work is done) and are added in chunk order in double,
// with no atomics, so results do not depend on the device or on scheduling.
// rows == 0 zero-fills grad_weight (and grad_bias).
template <typename T>
Status AddRmsNormBackwardCuda(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                              const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                              int64_t cols, const AddRmsNormAttrs& attrs, void* scratch, CudaStream stream);

}  // namespace opbridge
