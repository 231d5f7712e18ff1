// add_layer_norm's CUDA kernels, on the normalization kernels shared with
// layer_norm (opbridge/cuda_norms.cuh): the add is fused into the first pass
// over each row, its gradient into the last pass of the backward.
#include <cstddef>
#include <cstdint>

#include "opbridge/cuda.h"
#include "opbridge/cuda_norms.cuh"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "ops/add_layer_norm/kernel.h"
#include "ops/add_layer_norm/spec.h"

namespace opbridge {

template <typename T>
Status AddLayerNormForwardCuda(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                               T* residual_out, int64_t rows, int64_t cols, const AddLayerNormAttrs& attrs,
                               CudaStream stream) {
  return cuda::norms::Forward<cuda::norms::Norm::kLayer, NormResidual::kAdded, T>(
      kAddLayerNormSpec, x, residual, weight, bias, out, residual_out, rows, cols, attrs.eps, stream);
}

template <typename T>
size_t AddLayerNormBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  return cuda::norms::ScratchBytes<T>(rows, cols);
}

template <typename T>
Status AddLayerNormBackwardCuda(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                                const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                                int64_t cols, const AddLayerNormAttrs& attrs, void* scratch,
                                CudaStream stream) {
  return cuda::norms::Backward<cuda::norms::Norm::kLayer, T>(
      kAddLayerNormSpec, grad_out, grad_residual_out, residual_out, weight, grad_sum, grad_weight, grad_bias,
      rows, cols, attrs.eps, scratch, stream);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template Status AddLayerNormForwardCuda<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t,      \
                                             int64_t, const AddLayerNormAttrs&, CudaStream);               \
  template size_t AddLayerNormBackwardCudaScratchBytes<T>(int64_t, int64_t);                               \
  template Status AddLayerNormBackwardCuda<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                              int64_t, const AddLayerNormAttrs&, void*, CudaStream);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchAddLayerNormCuda(const KernelArgs& args) {
  return cuda::norms::LaunchForwardArgs<cuda::norms::Norm::kLayer, NormResidual::kAdded>(kAddLayerNormSpec,
                                                                                         args);
}

Status LaunchAddLayerNormBackwardCuda(const KernelArgs& args) {
  return cuda::norms::LaunchBackwardArgs<cuda::norms::Norm::kLayer, NormResidual::kAdded>(
      kAddLayerNormSpec, "residual_out", args);
}

}  // namespace
}  // namespace opbridge

OPBRIDGE_REGISTER_CUDA_KERNELS(opbridge::kAddLayerNormSpec, opbridge::LaunchAddLayerNormCuda,
                               opbridge::LaunchAddLayerNormBackwardCuda)
