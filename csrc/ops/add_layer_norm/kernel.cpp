// add_layer_norm on layer_norm's vectorized row kernels: the add is fused
// into the first pass over each row (ops/layer_norm/kernel.cpp), and its
// gradient into the last pass of the backward.
#include "ops/add_layer_norm/kernel.h"

#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "ops/add_layer_norm/spec.h"
#include "ops/layer_norm/kernel.h"

namespace opbridge {

template <typename T>
void AddLayerNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                         T* residual_out, int64_t rows, int64_t cols, const AddLayerNormAttrs& attrs,
                         const ParallelFor& parallel_for) {
  LayerNormForwardOfSum<T>(x, residual, weight, bias, out, residual_out, rows, cols,
                           LayerNormAttrs{attrs.eps}, parallel_for);
}

template <typename T>
void AddLayerNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                          const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                          int64_t cols, const AddLayerNormAttrs& attrs, const ParallelFor& parallel_for) {
  LayerNormBackward<T>(grad_out, grad_residual_out, residual_out, weight, grad_sum, grad_weight, grad_bias,
                       rows, cols, LayerNormAttrs{attrs.eps}, parallel_for);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                          \
  template void AddLayerNormForward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                       const AddLayerNormAttrs&, const ParallelFor&);                    \
  template void AddLayerNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,     \
                                        int64_t, const AddLayerNormAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

Status LaunchAddLayerNorm(const KernelArgs& args) {
  return DispatchNormForward<NormResidual::kAdded>(kAddLayerNormSpec, args, [&](const auto& t) {
    AddLayerNormForward(t.x, t.residual, t.weight, t.bias, t.y, t.sum, t.rows, t.cols,
                        AddLayerNormAttrs{t.eps}, args.parallel_for);
  });
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight (or
// null); outputs: the gradient of x + residual, grad_weight and grad_bias
// (each null when not needed).
Status LaunchAddLayerNormBackward(const KernelArgs& args) {
  return DispatchNormBackward<NormResidual::kAdded>(
      kAddLayerNormSpec, "residual_out", args, [&](const auto& t) {
        AddLayerNormBackward(t.grad_y, t.grad_sum, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias,
                             t.rows, t.cols, AddLayerNormAttrs{t.eps}, args.parallel_for);
      });
}

}  // namespace opbridge
