// layer_norm's CUDA kernels, on the normalization kernels shared with
// add_layer_norm (opbridge/cuda_norms.cuh).
#include <cstddef>
#include <cstdint>

#include "opbridge/checks.h"
#include "opbridge/cuda.h"
#include "opbridge/cuda_device.cuh"
#include "opbridge/cuda_norms.cuh"
#include "opbridge/half.h"
#include "ops/layer_norm/kernel.h"
#include "ops/layer_norm/spec.h"

namespace opbridge {

template <typename T>
Status LayerNormForwardCuda(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                            const LayerNormAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return cuda::norms::LaunchForward<cuda::norms::Norm::kLayer, false, D>(
      kLayerNormSpec, reinterpret_cast<const D*>(x), nullptr, reinterpret_cast<const D*>(weight),
      reinterpret_cast<const D*>(bias), reinterpret_cast<D*>(y), nullptr, rows, cols, attrs.eps, stream);
}

template <typename T>
size_t LayerNormBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  return cuda::norms::BackwardScratchBytes<cuda::DeviceType<T>>(rows, cols);
}

template <typename T>
Status LayerNormBackwardCuda(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight,
                             T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                             void* scratch, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return cuda::norms::LaunchBackward<cuda::norms::Norm::kLayer, D>(
      kLayerNormSpec, reinterpret_cast<const D*>(grad_y), nullptr, reinterpret_cast<const D*>(x),
      reinterpret_cast<const D*>(weight), reinterpret_cast<D*>(grad_x), reinterpret_cast<D*>(grad_weight),
      reinterpret_cast<D*>(grad_bias), rows, cols, attrs.eps, scratch, stream);
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
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  const LayerNormAttrs attrs{args.attrs[0].number};
  Status launched;
  OPBRIDGE_RETURN_IF_ERROR(
      DispatchFloatingOrHalf(kLayerNormSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        launched = LayerNormForwardCuda<T>(static_cast<const T*>(args.inputs[0]),
                                           static_cast<const T*>(args.inputs[1]),
                                           static_cast<const T*>(args.inputs[2]),
                                           static_cast<T*>(args.outputs[0]), rows, cols, attrs, args.stream);
      }));
  return launched;
}

// Backward inputs: grad_y, x, weight (or null); outputs: grad_x, grad_weight
// and grad_bias (each null when not needed).
Status LaunchLayerNormBackwardCuda(const KernelArgs& args) {
  const Shape& x_shape = args.input_infos[1].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  const LayerNormAttrs attrs{args.attrs[0].number};
  Status launched;
  OPBRIDGE_RETURN_IF_ERROR(
      DispatchFloatingOrHalf(kLayerNormSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
        using T = decltype(tag);
        T* grad_weight = static_cast<T*>(args.outputs[1]);
        T* grad_bias = static_cast<T*>(args.outputs[2]);
        unsigned char* scratch = nullptr;
        const size_t scratch_bytes = LayerNormBackwardCudaScratchBytes<T>(rows, cols);
        if (scratch_bytes > 0 && (grad_weight != nullptr || grad_bias != nullptr)) {
          launched = cuda::Scratch(kLayerNormSpec, args, scratch_bytes, &scratch);
          if (!launched.ok()) return;
        }
        launched = LayerNormBackwardCuda<T>(
            static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
            static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]), grad_weight, grad_bias,
            rows, cols, attrs, scratch, args.stream);
      }));
  return launched;
}

}  // namespace
}  // namespace opbridge

OPBRIDGE_REGISTER_CUDA_KERNELS(opbridge::kLayerNormSpec, opbridge::LaunchLayerNormCuda,
                               opbridge::LaunchLayerNormBackwardCuda)
