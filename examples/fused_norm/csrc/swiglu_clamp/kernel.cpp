// swiglu_clamp's kernels on the SDK's kernel toolkit
// (opbridge/toolkit/map-inl.h): the math once per direction as a functor;
// the toolkit's elementwise map does the loop, the dtypes, the SIMD targets
// and the threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "swiglu_clamp/kernel.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/map-inl.h"
#include "opbridge/toolkit/math-inl.h"
#include "swiglu_clamp/spec.h"

HWY_BEFORE_NAMESPACE();
namespace myops {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// y = silu(min(gate, limit)) * clamp(up, -limit, limit).
struct SwigluClampOp {
  explicit SwigluClampOp(const tk::Params& p) : limit(p[0]) {}
  template <class D, class V>
  HWY_INLINE V operator()(D d, V gate, V up) const {
    const V lim = tk::Set(d, limit);
    return hn::Mul(tk::Silu(d, tk::ClampMax(gate, lim)), tk::Clamp(up, hn::Neg(lim), lim));
  }
  double limit;
};

// torch.clamp passes the gradient where the input is inside its bounds
// (inclusive) and gives 0 elsewhere:
//   grad_gate = grad_y * clamp(up) * silu'(gate)   where gate <= limit
//   grad_up   = grad_y * silu(min(gate, limit))    where -limit <= up <= limit
struct SwigluClampGrad {
  explicit SwigluClampGrad(const tk::Params& p) : limit(p[0]) {}
  template <class D, class V>
  HWY_INLINE void operator()(D d, V grad_y, V gate, V up, V& grad_gate, V& grad_up) const {
    const V lim = tk::Set(d, limit);
    const V g = tk::ClampMax(gate, lim);
    const V u = tk::Clamp(up, hn::Neg(lim), lim);
    grad_gate = hn::IfThenElseZero(hn::Le(gate, lim), hn::Mul(hn::Mul(grad_y, u), tk::SiluGrad(d, g)));
    grad_up = hn::IfThenElseZero(hn::And(hn::Ge(up, hn::Neg(lim)), hn::Le(up, lim)),
                                 hn::Mul(grad_y, tk::Silu(d, g)));
  }
  double limit;
};

}  // namespace HWY_NAMESPACE
}  // namespace myops
HWY_AFTER_NAMESPACE();

OPBRIDGE_MAP_KERNEL(myops, SwigluClampForward, SwigluClampOp, 2, 1);
OPBRIDGE_MAP_KERNEL(myops, SwigluClampBackward, SwigluClampGrad, 3, 2);

#if HWY_ONCE
#include <cmath>
#include <string>

#include "opbridge/checks.h"

namespace myops {

using opbridge::KernelArgs;
using opbridge::Status;

namespace {

// limit > 0; inf leaves both inputs unclamped.
Status CheckLimit(double limit) {
  if (!(limit > 0.0)) {
    return opbridge::ArgError(kSwigluClampSpec, "limit", "must be positive, got " + std::to_string(limit));
  }
  return Status::Ok();
}

}  // namespace

Status LaunchSwigluClamp(const KernelArgs& args) {
  const double limit = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckLimit(limit));
  return opbridge::toolkit::Map(SwigluClampForward, kSwigluClampSpec, args, {limit});
}

// Backward inputs: grad_y, gate, up; outputs: grad_gate, grad_up.
Status LaunchSwigluClampBackward(const KernelArgs& args) {
  const double limit = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckLimit(limit));
  return opbridge::toolkit::Map(SwigluClampBackward, kSwigluClampSpec, args, {limit});
}

}  // namespace myops
#endif  // HWY_ONCE
