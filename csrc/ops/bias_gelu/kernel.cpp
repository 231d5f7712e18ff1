// bias_gelu kernels on the kernel toolkit (opbridge/toolkit/map-inl.h and
// math-inl.h): the bias a per-column input of the elementwise map, its
// gradient a column sum; compiled once per SIMD target and dispatched at run
// time. float32, float16 and bfloat16 compute in float32 lanes, float64 in
// float64 lanes (the erf form with std::erfc lane by lane). One pass over
// memory in each direction.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/bias_gelu/kernel.cpp"
#include "ops/bias_gelu/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/map-inl.h"
#include "opbridge/toolkit/math-inl.h"
#include "ops/bias_gelu/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// y = gelu(x + bias).
template <bool kTanh>
struct BiasGeluOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x, V bias) const {
    const V v = hn::Add(x, bias);
    return kTanh ? tk::GeluTanh(d, v) : tk::GeluErf(d, v);
  }
};

// grad_x = grad_y * gelu'(x + bias); grad_bias is grad_x summed over rows
// (the map's column-sum output).
template <bool kTanh>
struct BiasGeluGrad {
  template <class D, class V>
  HWY_INLINE void operator()(D d, V grad_y, V x, V bias, V& grad_x, V& grad_bias) const {
    const V v = hn::Add(x, bias);
    grad_x = hn::Mul(grad_y, kTanh ? tk::GeluTanhGrad(d, v) : tk::GeluErfGrad(d, v));
    grad_bias = grad_x;
  }
};

using BiasGeluErf = BiasGeluOp<false>;
using BiasGeluTanh = BiasGeluOp<true>;
using BiasGeluErfGrad = BiasGeluGrad<false>;
using BiasGeluTanhGrad = BiasGeluGrad<true>;

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

OPBRIDGE_MAP_KERNEL(opbridge, BiasGeluErfKernel, BiasGeluErf, 2, 1);
OPBRIDGE_MAP_KERNEL(opbridge, BiasGeluTanhKernel, BiasGeluTanh, 2, 1);
OPBRIDGE_MAP_KERNEL(opbridge, BiasGeluErfGradKernel, BiasGeluErfGrad, 3, 2);
OPBRIDGE_MAP_KERNEL(opbridge, BiasGeluTanhGradKernel, BiasGeluTanhGrad, 3, 2);

#if HWY_ONCE
namespace opbridge {

template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for) {
  toolkit::Map<T>(attrs.use_tanh ? BiasGeluTanhKernel : BiasGeluErfKernel, rows, cols,
                  {toolkit::Full(x), toolkit::PerColumn(bias)}, {toolkit::Full(y)}, {}, parallel_for);
}

template <typename T>
void BiasGeluBackward(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                      int64_t cols, const BiasGeluAttrs& attrs, const ParallelFor& parallel_for) {
  toolkit::Map<T>(attrs.use_tanh ? BiasGeluTanhGradKernel : BiasGeluErfGradKernel, rows, cols,
                  {toolkit::Full(grad_y), toolkit::Full(x), toolkit::PerColumn(bias)},
                  {toolkit::Full(grad_x), toolkit::ColumnSum(grad_bias)}, {}, parallel_for);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                    \
  template void BiasGeluForward<T>(const T*, const T*, T*, int64_t, int64_t, const BiasGeluAttrs&, \
                                   const ParallelFor&);                                            \
  template void BiasGeluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,        \
                                    const BiasGeluAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

namespace {

// x is [..., cols], bias [cols]: the map's iteration space is [rows, cols].
struct Dims {
  int64_t rows;
  int64_t cols;
};
Dims DimsOf(const Shape& x_shape) {
  const int64_t cols = x_shape.back();
  return {cols == 0 ? 0 : NumElements(x_shape) / cols, cols};
}

}  // namespace

Status LaunchBiasGelu(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Dims dims = DimsOf(args.input_infos[0].shape);
  return DispatchFloatingOrHalf(kBiasGeluSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    BiasGeluForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                       static_cast<T*>(args.outputs[0]), dims.rows, dims.cols, attrs, args.parallel_for);
  });
}

// Backward inputs: grad_y, x, bias; outputs: grad_x, grad_bias (or null).
Status LaunchBiasGeluBackward(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Dims dims = DimsOf(args.input_infos[1].shape);
  return DispatchFloatingOrHalf(kBiasGeluSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    BiasGeluBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                        static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]),
                        static_cast<T*>(args.outputs[1]), dims.rows, dims.cols, attrs, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
