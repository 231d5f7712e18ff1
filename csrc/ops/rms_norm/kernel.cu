// rms_norm's CUDA kernels, on the normalization kernels shared with
// add_rms_norm (opbridge/cuda_norms.cuh).
#include <cstddef>
#include <cstdint>

#include "opbridge/cuda.h"
#include "opbridge/cuda_norms.cuh"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "ops/rms_norm/kernel.h"
#include "ops/rms_norm/spec.h"

namespace opbridge {

template <typename T>
Status RmsNormForwardCuda(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                          const RmsNormAttrs& attrs, CudaStream stream) {
  return cuda::norms::Forward<cuda::norms::Norm::kRms, NormResidual::kNone, T>(
      kRmsNormSpec, x, nullptr, weight, bias, y, nullptr, rows, cols, attrs.eps, stream);
}

template <typename T>
size_t RmsNormBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  return cuda::norms::ScratchBytes<T>(rows, cols);
}

template <typename T>
Status RmsNormBackwardCuda(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight,
                           T* grad_bias, int64_t rows, int64_t cols, const RmsNormAttrs& attrs, void* scratch,
                           CudaStream stream) {
  return cuda::norms::Backward<cuda::norms::Norm::kRms, T>(kRmsNormSpec, grad_y, nullptr, x, weight, grad_x,
                                                           grad_weight, grad_bias, rows, cols, attrs.eps,
                                                           scratch, stream);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                      \
  template Status RmsNormForwardCuda<T>(const T*, const T*, const T*, T*, int64_t, int64_t,          \
                                        const RmsNormAttrs&, CudaStream);                            \
  template size_t RmsNormBackwardCudaScratchBytes<T>(int64_t, int64_t);                              \
  template Status RmsNormBackwardCuda<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                         const RmsNormAttrs&, void*, CudaStream);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchRmsNormCuda(const KernelArgs& args) {
  return cuda::norms::LaunchForwardArgs<cuda::norms::Norm::kRms, NormResidual::kNone>(kRmsNormSpec, args);
}

Status LaunchRmsNormBackwardCuda(const KernelArgs& args) {
  return cuda::norms::LaunchBackwardArgs<cuda::norms::Norm::kRms, NormResidual::kNone>(kRmsNormSpec, "x",
                                                                                       args);
}

}  // namespace
}  // namespace opbridge

OPBRIDGE_REGISTER_CUDA_KERNELS(opbridge::kRmsNormSpec, opbridge::LaunchRmsNormCuda,
                               opbridge::LaunchRmsNormBackwardCuda)
