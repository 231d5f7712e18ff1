// Vector sine and cosine for kernels and map functors, per SIMD target:
// float32 and float64 lanes, defined on the whole real line (+-inf and NaN
// give NaN). On |x| <= 39000 they are Highway's Sin and Cos (one range
// reduction and polynomial, in the registers); a vector with any lane beyond
// that (or NaN, or an infinity) is computed lane by lane with libm in double,
// so a rare large angle costs time, never accuracy.
//
// Accuracy, as toolkit_math_test.cpp measures it on every SIMD target
// against libm in double (float32) and long double (float64), over a dense
// sweep of the whole range, the extremes, +-inf and NaN: a result is within
// `ulp` units in the last place of the exact result, or within
// abs * max(1, |x|) of it (near a zero of the function, where the reduced
// angle's own rounding decides):
//
//   function      float32                float64
//   Sin           3 ulp or abs 1e-7      3 ulp or abs 5e-16
//   Cos           3 ulp or abs 1e-7      3 ulp or abs 5e-16
//
// float16 and bfloat16 tensors reach these functions as float32 lanes
// (simd::ReadLanes widens them in the registers; the map and row toolkits
// do it for you) and leave rounded once to the 16-bit type: every one of
// the 65536 16-bit inputs gives a result within one unit in the last place
// of that type (the test checks each value of both types on every target).
#if defined(OPBRIDGE_TOOLKIT_TRIG_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_TOOLKIT_TRIG_INL_H_
#undef OPBRIDGE_TOOLKIT_TRIG_INL_H_
#else
#define OPBRIDGE_TOOLKIT_TRIG_INL_H_
#endif

#include <hwy/highway.h>
// clang-format off
#include <hwy/contrib/math/math-inl.h>  // after highway.h
// clang-format on

#include <cmath>

#include "opbridge/toolkit/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace toolkit {

namespace hn = hwy::HWY_NAMESPACE;

namespace trig_internal {

// Highway's Sin and Cos are specified on [-39000, 39000].
constexpr double kHighwayRange = 39000.0;

template <class D, class V>
HWY_INLINE bool AllInRange(D d, V x) {
  // NaN compares false: a NaN lane takes the lane-by-lane path too.
  return hn::AllTrue(d, hn::Le(hn::Abs(x), hn::Set(d, static_cast<hn::TFromD<D>>(kHighwayRange))));
}

// fn (libm, in double) applied lane by lane: the path of a vector with a
// lane beyond Highway's range.
template <class D, class V, typename Fn>
HWY_NOINLINE V InDouble(D d, V x, Fn fn) {
  using T = hn::TFromD<D>;
  return math_internal::PerLane(d, x, [fn](T v) { return static_cast<T>(fn(static_cast<double>(v))); });
}

}  // namespace trig_internal

// sin(x).
template <class D, class V>
HWY_INLINE V Sin(D d, V x) {
  if (HWY_LIKELY(trig_internal::AllInRange(d, x))) return hn::Sin(d, x);
  return trig_internal::InDouble(d, x, [](double v) { return std::sin(v); });
}

// cos(x).
template <class D, class V>
HWY_INLINE V Cos(D d, V x) {
  if (HWY_LIKELY(trig_internal::AllInRange(d, x))) return hn::Cos(d, x);
  return trig_internal::InDouble(d, x, [](double v) { return std::cos(v); });
}

// *s = sin(x), *c = cos(x): the pair a rotation needs, with one range check.
template <class D, class V>
HWY_INLINE void SinCos(D d, V x, V* s, V* c) {
  if (HWY_LIKELY(trig_internal::AllInRange(d, x))) {
    *s = hn::Sin(d, x);
    *c = hn::Cos(d, x);
    return;
  }
  *s = trig_internal::InDouble(d, x, [](double v) { return std::sin(v); });
  *c = trig_internal::InDouble(d, x, [](double v) { return std::cos(v); });
}

}  // namespace toolkit
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)
