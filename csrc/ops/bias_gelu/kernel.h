// Framework-free bias_gelu kernels over [rows, cols] contiguous matrices.
#pragma once

#include <cstdint>

#include "opbridge/parallel.h"

namespace opbridge {

struct BiasGeluAttrs {
  bool use_tanh;  // false: 0.5 v (1 + erf(v / sqrt(2))); true: the tanh form
};

// y = gelu(x + bias), bias broadcast over rows.
template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for);

// grad_x = grad_y * gelu'(x + bias); grad_bias (cols elements, may be null) is
// grad_x summed over rows in a fixed, shape-determined order.
template <typename T>
void BiasGeluBackward(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                      int64_t cols, const BiasGeluAttrs& attrs, const ParallelFor& parallel_for);

}  // namespace opbridge
