// add_layer_norm on layer_norm's vectorized row kernels: the add is fused
// into the first pass over each row (ops/layer_norm/kernel.cpp), and its
// gradient into the last pass of the backward.
#include "ops/add_layer_norm/kernel.h"

#include "opbridge/checks.h"
#include "opbridge/half.h"
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
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

Status LaunchAddLayerNorm(const KernelArgs& args) {
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  const AddLayerNormAttrs attrs{args.attrs[0].number};
  return DispatchFloatingOrHalf(kAddLayerNormSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    AddLayerNormForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                           static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
                           static_cast<T*>(args.outputs[0]), static_cast<T*>(args.outputs[1]), rows, cols,
                           attrs, args.parallel_for);
  });
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight (or
// null); outputs: the gradient of x + residual, grad_weight and grad_bias
// (each null when not needed).
Status LaunchAddLayerNormBackward(const KernelArgs& args) {
  const Shape& shape = args.input_infos[2].shape;
  const int64_t cols = shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(shape) / cols;
  const AddLayerNormAttrs attrs{args.attrs[0].number};
  return DispatchFloatingOrHalf(kAddLayerNormSpec, "residual_out", args.input_infos[2].dtype, [&](auto tag) {
    using T = decltype(tag);
    AddLayerNormBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                            static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
                            static_cast<T*>(args.outputs[0]), static_cast<T*>(args.outputs[1]),
                            static_cast<T*>(args.outputs[2]), rows, cols, attrs, args.parallel_for);
  });
}

}  // namespace opbridge
