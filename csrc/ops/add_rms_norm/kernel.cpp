// add_rms_norm on rms_norm's row kernels (ops/rms_norm/kernel.cpp, on the row
// skeleton opbridge/toolkit/rows-inl.h): the add is fused into the first
// pass over each row, which writes residual_out and sums its squares, and
// recomputed from cache in the second, so both outputs can be written with
// non-temporal stores; its gradient is fused into the last pass of the
// backward.
#include "ops/add_rms_norm/kernel.h"

#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "ops/add_rms_norm/spec.h"
#include "ops/rms_norm/kernel.h"

namespace opbridge {

template <typename T>
void AddRmsNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out, T* residual_out,
                       int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                       const ParallelFor& parallel_for) {
  RmsNormForwardOfSum<T>(x, residual, weight, bias, out, residual_out, rows, cols, RmsNormAttrs{attrs.eps},
                         parallel_for);
}

template <typename T>
void AddRmsNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight,
                        T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                        const AddRmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  RmsNormBackwardWithAdd<T>(grad_out, grad_residual_out, residual_out, weight, grad_sum, grad_weight,
                            grad_bias, rows, cols, RmsNormAttrs{attrs.eps}, parallel_for);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                             \
  template void AddRmsNormForward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,      \
                                     const AddRmsNormAttrs&, const ParallelFor&);                           \
  template void AddRmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                      const AddRmsNormAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

Status LaunchAddRmsNorm(const KernelArgs& args) {
  return DispatchNormForward<NormResidual::kAdded>(kAddRmsNormSpec, args, [&](const auto& t) {
    AddRmsNormForward(t.x, t.residual, t.weight, t.bias, t.y, t.sum, t.rows, t.cols, AddRmsNormAttrs{t.eps},
                      args.parallel_for);
  });
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight;
// outputs: the gradient of x + residual, grad_weight, grad_bias (or null).
Status LaunchAddRmsNormBackward(const KernelArgs& args) {
  return DispatchNormBackward<NormResidual::kAdded>(kAddRmsNormSpec, "x", args, [&](const auto& t) {
    AddRmsNormBackward(t.grad_y, t.grad_sum, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias, t.rows,
                       t.cols, AddRmsNormAttrs{t.eps}, args.parallel_for);
  });
}

}  // namespace opbridge
