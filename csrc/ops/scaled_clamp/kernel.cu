// scaled_clamp CUDA kernels: one pass over memory in each direction, 16-byte
// vectors where the pointers allow, the same math as the CPU kernel
// (kernel.cpp): the attributes narrowed to float32 for every type but
// float64, torch.clamp's NaN rules and inclusive gradient bounds.
#include <cmath>
#include <cstdint>
#include <limits>

#include "opbridge/checks.h"
#include "opbridge/cuda_device.cuh"
#include "ops/scaled_clamp/kernel.h"
#include "ops/scaled_clamp/spec.h"

namespace opbridge {
namespace {

constexpr int kThreads = 256;

template <typename A>
struct ClampParams {
  A scale;
  A lo;
  A hi;
};

// As std::min(std::max(v, lo), hi): NaN propagates and lo > hi gives hi.
template <typename A>
__device__ __forceinline__ A ScaledClampOf(A x, const ClampParams<A>& p) {
  const A v = x * p.scale;
  const A low = v < p.lo ? p.lo : v;
  return p.hi < low ? p.hi : low;
}

// grad_y * scale where lo <= x * scale <= hi (inclusive), else 0.
template <typename A>
__device__ __forceinline__ A ScaledClampGradOf(A grad, A x, const ClampParams<A>& p) {
  const A v = x * p.scale;
  return (v >= p.lo && v <= p.hi) ? grad * p.scale : A(0);
}

// Vectors of W elements over the first n / W * W elements, then the last
// n % W one at a time (W == 1: element by element, any alignment).
template <typename D, int W>
__global__ void ScaledClampForwardKernel(const D* __restrict__ x, D* __restrict__ y, int64_t n,
                                         ClampParams<cuda::Acc<D>> p) {
  using V = cuda::Vec<D, W>;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t vectors = n / W;
  for (int64_t i = start; i < vectors; i += stride) {
    V v = reinterpret_cast<const V*>(x)[i];
#pragma unroll
    for (int k = 0; k < W; ++k) v.values[k] = cuda::FromAcc<D>(ScaledClampOf(cuda::ToAcc(v.values[k]), p));
    reinterpret_cast<V*>(y)[i] = v;
  }
  for (int64_t i = vectors * W + start; i < n; i += stride) {
    y[i] = cuda::FromAcc<D>(ScaledClampOf(cuda::ToAcc(x[i]), p));
  }
}

template <typename D, int W>
__global__ void ScaledClampBackwardKernel(const D* __restrict__ grad_y, const D* __restrict__ x,
                                          D* __restrict__ grad_x, int64_t n, ClampParams<cuda::Acc<D>> p) {
  using V = cuda::Vec<D, W>;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t vectors = n / W;
  for (int64_t i = start; i < vectors; i += stride) {
    const V g = reinterpret_cast<const V*>(grad_y)[i];
    const V xv = reinterpret_cast<const V*>(x)[i];
    V out;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      out.values[k] =
          cuda::FromAcc<D>(ScaledClampGradOf(cuda::ToAcc(g.values[k]), cuda::ToAcc(xv.values[k]), p));
    }
    reinterpret_cast<V*>(grad_x)[i] = out;
  }
  for (int64_t i = vectors * W + start; i < n; i += stride) {
    grad_x[i] = cuda::FromAcc<D>(ScaledClampGradOf(cuda::ToAcc(grad_y[i]), cuda::ToAcc(x[i]), p));
  }
}

// The attributes as the element type sees them (float32 for all but
// float64), as the CPU kernel's Narrowed.
template <typename A>
ClampParams<A> ParamsOf(const ScaledClampAttrs& attrs) {
  return {static_cast<A>(attrs.scale), static_cast<A>(attrs.min_val), static_cast<A>(attrs.max_val)};
}

}  // namespace

template <typename T>
Status ScaledClampForwardCuda(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  using A = cuda::Acc<D>;
  if (n <= 0) return Status::Ok();
  ClampParams<A> p = ParamsOf<A>(attrs);
  // torch.clamp propagates a NaN bound to every element: a NaN scale makes
  // every x * scale NaN, which the clamp keeps.
  if (std::isnan(p.lo) || std::isnan(p.hi)) p.scale = std::numeric_limits<A>::quiet_NaN();
  const D* dx = reinterpret_cast<const D*>(x);
  D* dy = reinterpret_cast<D*>(y);
  constexpr int W = cuda::kVecWidth<D>;
  if (cuda::VecAligned<D>({x, y})) {
    ScaledClampForwardKernel<D, W><<<cuda::GridFor(n / W, kThreads), kThreads, 0, stream>>>(dx, dy, n, p);
  } else {
    ScaledClampForwardKernel<D, 1><<<cuda::GridFor(n, kThreads), kThreads, 0, stream>>>(dx, dy, n, p);
  }
  return cuda::LaunchStatus(kScaledClampSpec, "ScaledClampForward");
}

template <typename T>
Status ScaledClampBackwardCuda(const T* grad_y, const T* x, T* grad_x, int64_t n,
                               const ScaledClampAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  using A = cuda::Acc<D>;
  if (n <= 0) return Status::Ok();
  const ClampParams<A> p = ParamsOf<A>(attrs);
  const D* dg = reinterpret_cast<const D*>(grad_y);
  const D* dx = reinterpret_cast<const D*>(x);
  D* dgx = reinterpret_cast<D*>(grad_x);
  constexpr int W = cuda::kVecWidth<D>;
  if (cuda::VecAligned<D>({grad_y, x, grad_x})) {
    ScaledClampBackwardKernel<D, W>
        <<<cuda::GridFor(n / W, kThreads), kThreads, 0, stream>>>(dg, dx, dgx, n, p);
  } else {
    ScaledClampBackwardKernel<D, 1><<<cuda::GridFor(n, kThreads), kThreads, 0, stream>>>(dg, dx, dgx, n, p);
  }
  return cuda::LaunchStatus(kScaledClampSpec, "ScaledClampBackward");
}

#define OPBRIDGE_INSTANTIATE(T)                                                                          \
  template Status ScaledClampForwardCuda<T>(const T*, T*, int64_t, const ScaledClampAttrs&, CudaStream); \
  template Status ScaledClampBackwardCuda<T>(const T*, const T*, T*, int64_t, const ScaledClampAttrs&,   \
                                             CudaStream);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchScaledClampCuda(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  const int64_t n = NumElements(args.input_infos[0].shape);
  return cuda::DispatchStorage(kScaledClampSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    return ScaledClampForwardCuda<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]),
                                     n, attrs, args.stream);
  });
}

// Backward inputs: grad_y, x; output: grad_x.
Status LaunchScaledClampBackwardCuda(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  const int64_t n = NumElements(args.input_infos[1].shape);
  return cuda::DispatchStorage(kScaledClampSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    return ScaledClampBackwardCuda<T>(static_cast<const T*>(args.inputs[0]),
                                      static_cast<const T*>(args.inputs[1]), static_cast<T*>(args.outputs[0]),
                                      n, attrs, args.stream);
  });
}

}  // namespace

OPBRIDGE_REGISTER_CUDA_KERNELS(kScaledClampSpec, LaunchScaledClampCuda, LaunchScaledClampBackwardCuda)

}  // namespace opbridge
