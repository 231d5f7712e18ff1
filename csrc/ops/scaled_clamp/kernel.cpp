// scaled_clamp kernels on the kernel toolkit's elementwise map
// (opbridge/toolkit/map-inl.h): one vectorized pass over memory, compiled
// once per SIMD target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scaled_clamp/kernel.cpp"
#include "ops/scaled_clamp/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/map-inl.h"
#include "opbridge/toolkit/math-inl.h"
#include "ops/scaled_clamp/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// Parameters: scale, min_val, max_val.
// clamp(x * scale, min_val, max_val), NaN propagating as in torch.clamp.
struct ScaledClampOp {
  explicit ScaledClampOp(const toolkit::Params& p) : scale(p[0]), lo(p[1]), hi(p[2]) {}
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    return tk::Clamp(hn::Mul(x, tk::Set(d, scale)), tk::Set(d, lo), tk::Set(d, hi));
  }
  double scale, lo, hi;
};

// grad_y * scale where min_val <= x * scale <= max_val (inclusive, as
// torch.clamp), else 0.
struct ScaledClampGrad {
  explicit ScaledClampGrad(const toolkit::Params& p) : scale(p[0]), lo(p[1]), hi(p[2]) {}
  template <class D, class V>
  HWY_INLINE V operator()(D d, V grad_y, V x) const {
    const V s = tk::Set(d, scale);
    const V v = hn::Mul(x, s);
    return hn::IfThenElseZero(hn::And(hn::Ge(v, tk::Set(d, lo)), hn::Le(v, tk::Set(d, hi))),
                              hn::Mul(grad_y, s));
  }
  double scale, lo, hi;
};

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

OPBRIDGE_MAP_KERNEL(opbridge, ScaledClampForwardKernel, ScaledClampOp, 1, 1);
OPBRIDGE_MAP_KERNEL(opbridge, ScaledClampBackwardKernel, ScaledClampGrad, 2, 1);

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace opbridge {
namespace {

// Attributes as the element type sees them (float32 for all but double).
toolkit::Params Narrowed(const ScaledClampAttrs& a, bool is_double) {
  if (is_double) return {a.scale, a.min_val, a.max_val};
  return {static_cast<float>(a.scale), static_cast<float>(a.min_val), static_cast<float>(a.max_val)};
}

}  // namespace

template <typename T>
void ScaledClampForward(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs,
                        const ParallelFor& parallel_for) {
  const toolkit::Params p = Narrowed(attrs, std::is_same_v<T, double>);
  if (std::isnan(p[1]) || std::isnan(p[2])) {
    // torch.clamp propagates a NaN bound to every element.
    std::fill(y, y + n, FromDouble<T>(std::numeric_limits<double>::quiet_NaN()));
    return;
  }
  toolkit::Map<T>(ScaledClampForwardKernel, 1, n, {toolkit::Full(x)}, {toolkit::Full(y)}, p, parallel_for);
}

template <typename T>
void ScaledClampBackward(const T* grad_y, const T* x, T* grad_x, int64_t n, const ScaledClampAttrs& attrs,
                         const ParallelFor& parallel_for) {
  toolkit::Map<T>(ScaledClampBackwardKernel, 1, n, {toolkit::Full(grad_y), toolkit::Full(x)},
                  {toolkit::Full(grad_x)}, Narrowed(attrs, std::is_same_v<T, double>), parallel_for);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void ScaledClampForward<T>(const T*, T*, int64_t, const ScaledClampAttrs&, const ParallelFor&); \
  template void ScaledClampBackward<T>(const T*, const T*, T*, int64_t, const ScaledClampAttrs&,           \
                                       const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

Status LaunchScaledClamp(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  const int64_t n = NumElements(args.input_infos[0].shape);
  return DispatchFloatingOrHalf(kScaledClampSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    ScaledClampForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), n, attrs,
                          args.parallel_for);
  });
}

// Backward inputs: grad_y, x; output: grad_x.
Status LaunchScaledClampBackward(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  return toolkit::Map(ScaledClampBackwardKernel, kScaledClampSpec, args,
                      Narrowed(attrs, args.input_infos[1].dtype == "float64"));
}

}  // namespace opbridge
#endif  // HWY_ONCE
