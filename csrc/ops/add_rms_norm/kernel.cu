// add_rms_norm's CUDA kernels, on the normalization kernels shared with
// rms_norm (opbridge/cuda_norms.cuh): the add is fused into the first pass
// over each row, its gradient into the last pass of the backward.
#include <cstddef>
#include <cstdint>

#include "opbridge/checks.h"
#include "opbridge/cuda.h"
#include "opbridge/cuda_device.cuh"
#include "opbridge/cuda_norms.cuh"
#include "opbridge/half.h"
#include "ops/add_rms_norm/kernel.h"
#include "ops/add_rms_norm/spec.h"

namespace opbridge {

template <typename T>
Status AddRmsNormForwardCuda(const T* x, const T* residual, const T* weight, const T* bias, T* out,
                             T* residual_out, int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                             CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return cuda::norms::LaunchForward<cuda::norms::Norm::kRms, true, D>(
      kAddRmsNormSpec, reinterpret_cast<const D*>(x), reinterpret_cast<const D*>(residual),
      reinterpret_cast<const D*>(weight), reinterpret_cast<const D*>(bias), reinterpret_cast<D*>(out),
      reinterpret_cast<D*>(residual_out), rows, cols, attrs.eps, stream);
}

template <typename T>
size_t AddRmsNormBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  return cuda::norms::BackwardScratchBytes<cuda::DeviceType<T>>(rows, cols);
}

template <typename T>
Status AddRmsNormBackwardCuda(const T* grad_out, const T* grad_residual_out, const T* residual_out,
                              const T* weight, T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows,
                              int64_t cols, const AddRmsNormAttrs& attrs, void* scratch, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return cuda::norms::LaunchBackward<cuda::norms::Norm::kRms, D>(
      kAddRmsNormSpec, reinterpret_cast<const D*>(grad_out), reinterpret_cast<const D*>(grad_residual_out),
      reinterpret_cast<const D*>(residual_out), reinterpret_cast<const D*>(weight),
      reinterpret_cast<D*>(grad_sum), reinterpret_cast<D*>(grad_weight), reinterpret_cast<D*>(grad_bias),
      rows, cols, attrs.eps, scratch, stream);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                              \
  template Status AddRmsNormForwardCuda<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                           const AddRmsNormAttrs&, CudaStream);                              \
  template size_t AddRmsNormBackwardCudaScratchBytes<T>(int64_t, int64_t);                                   \
  template Status AddRmsNormBackwardCuda<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,     \
                                            int64_t, const AddRmsNormAttrs&, void*, CudaStream);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchAddRmsNormCuda(const KernelArgs& args) {
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  const AddRmsNormAttrs attrs{args.attrs[0].number};
  Status launched;
  OPBRIDGE_RETURN_IF_ERROR(
      DispatchFloatingOrHalf(kAddRmsNormSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        launched = AddRmsNormForwardCuda<T>(
            static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
            static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
            static_cast<T*>(args.outputs[0]), static_cast<T*>(args.outputs[1]), rows, cols, attrs,
            args.stream);
      }));
  return launched;
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight;
// outputs: the gradient of x + residual, grad_weight, grad_bias (or null).
Status LaunchAddRmsNormBackwardCuda(const KernelArgs& args) {
  const Shape& shape = args.input_infos[2].shape;
  const int64_t cols = shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(shape) / cols;
  const AddRmsNormAttrs attrs{args.attrs[0].number};
  Status launched;
  OPBRIDGE_RETURN_IF_ERROR(
      DispatchFloatingOrHalf(kAddRmsNormSpec, "x", args.input_infos[2].dtype, [&](auto tag) {
        using T = decltype(tag);
        T* grad_weight = static_cast<T*>(args.outputs[1]);
        T* grad_bias = static_cast<T*>(args.outputs[2]);
        unsigned char* scratch = nullptr;
        const size_t scratch_bytes = AddRmsNormBackwardCudaScratchBytes<T>(rows, cols);
        if (scratch_bytes > 0 && (grad_weight != nullptr || grad_bias != nullptr)) {
          launched = cuda::Scratch(kAddRmsNormSpec, args, scratch_bytes, &scratch);
          if (!launched.ok()) return;
        }
        launched = AddRmsNormBackwardCuda<T>(
            static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
            static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
            static_cast<T*>(args.outputs[0]), grad_weight, grad_bias, rows, cols, attrs, scratch,
            args.stream);
      }));
  return launched;
}

}  // namespace
}  // namespace opbridge

OPBRIDGE_REGISTER_CUDA_KERNELS(opbridge::kAddRmsNormSpec, opbridge::LaunchAddRmsNormCuda,
                               opbridge::LaunchAddRmsNormBackwardCuda)
