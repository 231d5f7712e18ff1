// layer_norm's CUDA kernels, on the normalization kernels shared with
// add_layer_norm (opbridge/cuda_norms.cuh).
#include <cstddef>
#include <cstdint>

#include "opbridge/cuda.h"
#include "opbridge/cuda_norms.cuh"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "ops/layer_norm/kernel.h"
#include "ops/layer_norm/spec.h"

namespace opbridge {

template <typename T>
Status LayerNormForwardCuda(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                            const LayerNormAttrs& attrs, CudaStream stream) {
  return cuda::norms::Forward<cuda::norms::Norm::kLayer, NormResidual::kNone, T>(
      kLayerNormSpec, x, nullptr, weight, bias, y, nullptr, rows, cols, attrs.eps, stream);
}

template <typename T>
size_t LayerNormBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  return cuda::norms::ScratchBytes<T>(rows, cols);
}

template <typename T>
Status LayerNormBackwardCuda(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight,
                             T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                             void* scratch, CudaStream stream) {
  return cuda::norms::Backward<cuda::norms::Norm::kLayer, T>(kLayerNormSpec, grad_y, nullptr, x, weight,
                                                             grad_x, grad_weight, grad_bias, rows, cols,
                                                             attrs.eps, scratch, stream);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                        \
  template Status LayerNormForwardCuda<T>(const T*, const T*, const T*, T*, int64_t, int64_t,          \
                                          const LayerNormAttrs&, CudaStream);                          \
  template size_t LayerNormBackwardCudaScratchBytes<T>(int64_t, int64_t);                              \
  template Status LayerNormBackwardCuda<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                           const LayerNormAttrs&, void*, CudaStream);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchLayerNormCuda(const KernelArgs& args) {
  return cuda::norms::LaunchForwardArgs<cuda::norms::Norm::kLayer, NormResidual::kNone>(kLayerNormSpec, args);
}

Status LaunchLayerNormBackwardCuda(const KernelArgs& args) {
  return cuda::norms::LaunchBackwardArgs<cuda::norms::Norm::kLayer, NormResidual::kNone>(kLayerNormSpec, "x",
                                                                                         args);
}

}  // namespace
}  // namespace opbridge

OPBRIDGE_REGISTER_CUDA_KERNELS(opbridge::kLayerNormSpec, opbridge::LaunchLayerNormCuda,
                               opbridge::LaunchLayerNormBackwardCuda)
