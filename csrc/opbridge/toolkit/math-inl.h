// Vector math for map functors, per SIMD target: float32 and float64 lanes.
// Every function takes (d, x) like Highway's and is defined on the whole
// real line plus +-inf and NaN (NaN in gives NaN out), where Highway's own
// functions are only specified on a range. Accuracy: a result is within
// `ulp` units in the last place of the exact result, or within
// abs * max(1, |x|) of it, as toolkit_math_test.cpp measures on every SIMD
// target against libm in double (float32) and long double (float64), over a
// dense sweep of the whole range, the extremes, +-inf and NaN:
//
//   function      float32                float64
//   Exp           1 ulp (Highway's Exp)  1 ulp to x = 700, 3 ulp beyond
//   ExpFast       2 ulp, 0 below 2^-125  Exp
//   Log           1 ulp (Highway's Log)  1 ulp
//   Tanh          7 ulp (rational)       3 ulp (Highway's Tanh)
//   Sigmoid       3 ulp                  3 ulp
//   Erf           7 ulp or abs 1e-7      std::erf lane by lane (1 ulp)
//   Silu          4 ulp                  4 ulp
//   SiluGrad      4 ulp or abs 4e-7      4 ulp or abs 1e-15
//   GeluErf       4 ulp or abs 2e-7      2 ulp or abs 1e-16 (std::erfc)
//   GeluErfGrad   4 ulp or abs 4e-7      2 ulp or abs 4e-16 (std::erfc)
//   GeluTanh      4 ulp or abs 1e-7      4 ulp or abs 1e-15
//   GeluTanhGrad  4 ulp or abs 4e-7      4 ulp or abs 1e-15
//
// (Silu's ulp bound holds where sigmoid(x) is a normal number, x > -87 in
// float32.) Highway documents 1 ulp for Exp, 4 for Log and Tanh on their
// valid ranges. The test's kBounds is this table; keep them together.
#if defined(OPBRIDGE_TOOLKIT_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_TOOLKIT_MATH_INL_H_
#undef OPBRIDGE_TOOLKIT_MATH_INL_H_
#else
#define OPBRIDGE_TOOLKIT_MATH_INL_H_
#endif

#include <hwy/highway.h>
// clang-format off
#include <hwy/contrib/math/math-inl.h>  // after highway.h
// clang-format on

#include <cmath>
#include <limits>
#include <type_traits>

#include "opbridge/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace toolkit {

namespace hn = hwy::HWY_NAMESPACE;

namespace math_internal {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;
// erfc(x) ~ t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p x), x >= 0
// (Abramowitz and Stegun, Handbook of Mathematical Functions, 7.1.26;
// |error| <= 1.5e-7).
constexpr double kErfcP = 0.3275911;
constexpr double kErfcA[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};

template <class D>
HWY_INLINE hn::VFromD<D> K(D d, double value) {
  return hn::Set(d, static_cast<hn::TFromD<D>>(value));
}

template <class D>
constexpr bool IsF32() {
  return sizeof(hn::TFromD<D>) == 4;
}

// NaN lanes of x replace the result's (Highway's Min/Max and several of its
// functions drop NaN on some targets).
template <class D, class V>
HWY_INLINE V KeepNaN(D /*d*/, V x, V result) {
  return hn::IfThenElse(hn::IsNaN(x), x, result);
}

// fn applied lane by lane (libm where Highway has no such function).
template <class D, class V, typename Fn>
HWY_INLINE V PerLane(D d, V x, Fn fn) {
  alignas(64) hn::TFromD<D> lanes[simd::kMaxLanes];
  hn::StoreU(x, d, lanes);
  const size_t n = hn::Lanes(d);
  for (size_t i = 0; i < n; ++i) lanes[i] = fn(lanes[i]);
  return hn::LoadU(d, lanes);
}

// e^x for x no larger than Highway's valid maximum (104 in float32, 706 in
// float64), NaN not kept: the one-line form for arguments already bounded.
template <class D, class V>
HWY_INLINE V ExpBounded(D d, V x) {
  return hn::Exp(d, hn::Max(x, K(d, IsF32<D>() ? -104.0 : -745.0)));
}

}  // namespace math_internal

// torch.clamp's rule, by comparisons (hn::Min/Max treat NaN differently per
// target): NaN propagates, and lo > hi gives hi.
template <class V>
HWY_INLINE V Clamp(V v, V lo, V hi) {
  const V low = hn::IfThenElse(hn::Lt(v, lo), lo, v);
  return hn::IfThenElse(hn::Lt(hi, low), hi, low);
}
// torch.clamp(v, max=hi): NaN propagates.
template <class V>
HWY_INLINE V ClampMax(V v, V hi) {
  return hn::IfThenElse(hn::Lt(hi, v), hi, v);
}
// torch.clamp(v, min=lo): NaN propagates.
template <class V>
HWY_INLINE V ClampMin(V v, V lo) {
  return hn::IfThenElse(hn::Lt(v, lo), lo, v);
}

// e^x. Highway's Exp on its valid range; beyond it 0 or inf (float64 in
// (700, 709.78] as (e^(x/2))^2).
template <class D, class V>
HWY_INLINE V Exp(D d, V x) {
  using math_internal::K;
  if constexpr (math_internal::IsF32<D>()) {
    const V r = hn::Exp(d, hn::Min(hn::Max(x, K(d, -104.0)), K(d, 104.0)));
    const V big = hn::IfThenElse(hn::Gt(x, K(d, 88.72283935546875)), K(d, HUGE_VAL), r);
    return math_internal::KeepNaN(d, x, hn::IfThenZeroElse(hn::Lt(x, K(d, -104.0)), big));
  } else {
    // Past Highway's range, e^x = (e^(x/2))^2: x/2 is exact.
    const auto high = hn::Gt(x, K(d, 700.0));
    const V xc = hn::Min(hn::Max(x, K(d, -746.0)), K(d, 710.0));
    V r = hn::Exp(d, hn::IfThenElse(high, hn::Mul(xc, K(d, 0.5)), xc));
    r = hn::IfThenElse(high, hn::Mul(r, r), r);
    r = hn::IfThenElse(hn::Gt(x, K(d, 709.782712893384)), K(d, HUGE_VAL), r);
    return math_internal::KeepNaN(d, x, hn::IfThenZeroElse(hn::Lt(x, K(d, -746.0)), r));
  }
}

// e^x in about half Exp's instructions, for loops that are bound by their
// exps (a softmax's exp(z - max)). float32: 2 ulp where e^x >= 2^-125
// (x >= -86.64); below, 0 (an absolute error under 2.4e-38: no subnormal
// results); inf past 88.72; NaN in gives NaN out. float64: Exp.
// The argument is reduced to r = x - n ln2 (|r| <= ln2 / 2, n = round(x /
// ln2) by the 1.5 * 2^23 shifter), e^r is a degree-6 polynomial (a
// near-minimax fit, Horner's rule in fused multiply-adds, with 2 e^r's
// coefficients so that 2^(n - 1), a normal number for n in [-125, 128], is
// the scale). 16 vector instructions against Exp's 33.
template <class D, class V>
HWY_INLINE V ExpFast(D d, V x) {
  using math_internal::K;
  if constexpr (math_internal::IsF32<D>()) {
    const hn::RebindToSigned<D> di;
    const V shifter = K(d, 12582912.0);  // 1.5 * 2^23: t's low bits hold n
    const V t = hn::MulAdd(x, K(d, 1.44269504088896341), shifter);
    const V n = hn::Sub(t, shifter);
    V r = hn::NegMulAdd(n, K(d, 0.693145751953125), x);  // ln2's high part (exact product)
    r = hn::NegMulAdd(n, K(d, 1.428606765330187045e-6), r);
    // 2 e^r = 2 + 2 r + 2 c2 r^2 + ... (doubling is exact).
    V p = K(d, 2 * 0.0013814617414027452);
    p = hn::MulAdd(p, r, K(d, 2 * 0.008368710055947304));
    p = hn::MulAdd(p, r, K(d, 2 * 0.04166838899254799));
    p = hn::MulAdd(p, r, K(d, 2 * 0.1666652113199234));
    p = hn::MulAdd(p, r, K(d, 2 * 0.4999999403953552));
    p = hn::MulAdd(p, r, K(d, 2.0));
    p = hn::MulAdd(p, r, K(d, 2.0));
    // 2^(n - 1): t's bits shifted past the exponent leave n's low bits.
    const V scale = hn::BitCast(d, hn::Add(hn::ShiftLeft<23>(hn::BitCast(di, t)), hn::Set(di, 126 << 23)));
    const V y = hn::Mul(p, scale);
    const V big = hn::IfThenElse(hn::Gt(x, K(d, 88.72283935546875)), K(d, HUGE_VAL), y);
    return hn::IfThenZeroElse(hn::Lt(x, K(d, -86.64339757)), big);
  } else {
    return toolkit::Exp(d, x);
  }
}

// Natural logarithm: Highway's Log on (0, max]; log(0) = -inf, log(inf) =
// inf, negative x gives NaN.
template <class D, class V>
HWY_INLINE V Log(D d, V x) {
  using math_internal::K;
  const V inf = K(d, HUGE_VAL);
  const auto positive_finite = hn::And(hn::Gt(x, hn::Zero(d)), hn::Lt(x, inf));
  V r = hn::Log(d, hn::IfThenElse(positive_finite, x, K(d, 1.0)));
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);
  r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Neg(inf), r);
  r = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), K(d, std::numeric_limits<double>::quiet_NaN()), r);
  return math_internal::KeepNaN(d, x, r);
}

// Hyperbolic tangent. float32: a P(a^2) / Q(a^2) for a = min(|x|, 9), P
// and Q of degree 4, fitted here to tanh(a) / a on [0, 9] (minimax in the
// relative error by Lawson's iteration: 0.35 ulp before rounding), capped
// at 1 (it reaches 1 by a = 9, so +-inf gives +-1 exactly), with x's sign;
// eight multiply-adds and a division, about twice the speed of Highway's
// Tanh (an expm1 and a division), at 7 ulp where that measures 3. float64:
// Highway's Tanh, +-1 where the exact result rounds to it (|x| > 19.1).
template <class D, class V>
HWY_INLINE V Tanh(D d, V x) {
  using math_internal::K;
  if constexpr (math_internal::IsF32<D>()) {
    const V a = hn::Min(hn::Abs(x), K(d, 9.0));
    const V t = hn::Mul(a, a);
    V p = K(d, 1.3354062806820622e-08);
    p = hn::MulAdd(p, t, K(d, 2.06086645423901e-05));
    p = hn::MulAdd(p, t, K(d, 0.003495563575963058));
    p = hn::MulAdd(p, t, K(d, 0.1338100530208562));
    p = hn::MulAdd(p, t, K(d, 0.999999979506236));
    V q = K(d, 7.776317096129035e-07);
    q = hn::MulAdd(q, t, K(d, 0.00032855940398120696));
    q = hn::MulAdd(q, t, K(d, 0.02587688980393082));
    q = hn::MulAdd(q, t, K(d, 0.46714320909995605));
    q = hn::MulAdd(q, t, K(d, 1.0));
    const V r = hn::Min(hn::Div(hn::Mul(a, p), q), K(d, 1.0));
    return math_internal::KeepNaN(d, x, hn::CopySignToAbs(r, x));
  } else {
    const V limit = K(d, 19.1);
    const V r = hn::Tanh(d, hn::Min(hn::Max(x, hn::Neg(limit)), limit));
    const V saturated = hn::CopySign(K(d, 1.0), x);
    return math_internal::KeepNaN(d, x, hn::IfThenElse(hn::Gt(hn::Abs(x), limit), saturated, r));
  }
}

namespace math_internal {

// sigmoid(x) and 1 - sigmoid(x) = sigmoid(-x), each without cancellation:
// from e = exp(-|x|), 1 / (1 + e) is the larger of the two, e / (1 + e) the
// smaller (down to the subnormals).
template <class D, class V>
HWY_INLINE void SigmoidPair(D d, V x, V* s, V* one_minus_s) {
  const V one = K(d, 1.0);
  const V e = ExpBounded(d, hn::Neg(hn::Abs(x)));
  const V large = hn::Div(one, hn::Add(one, e));
  const V small = hn::Mul(e, large);
  const auto negative = hn::Lt(x, hn::Zero(d));
  *s = hn::IfThenElse(negative, small, large);
  *one_minus_s = hn::IfThenElse(negative, large, small);
}

}  // namespace math_internal

// 1 / (1 + e^-x), accurate at both ends (see SigmoidPair).
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  V s, one_minus_s;
  math_internal::SigmoidPair(d, x, &s, &one_minus_s);
  return math_internal::KeepNaN(d, x, s);
}

// The error function. float32: a rational approximation p(x) / q(x) on x
// clamped to [-4, 4] (erf(4) rounds to 1; the coefficients of Eigen's
// generic_fast_erf_float). float64: std::erf lane by lane.
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  using math_internal::K;
  if constexpr (math_internal::IsF32<D>()) {
    const V xc = hn::Min(hn::Max(x, K(d, -4.0)), K(d, 4.0));
    const V x2 = hn::Mul(xc, xc);
    V p = hn::MulAdd(x2, hn::Set(d, -2.72614225801306e-10f), hn::Set(d, 2.77068142495902e-08f));
    p = hn::MulAdd(x2, p, hn::Set(d, -2.10102402082508e-06f));
    p = hn::MulAdd(x2, p, hn::Set(d, -5.69250639462346e-05f));
    p = hn::MulAdd(x2, p, hn::Set(d, -7.34990630326855e-04f));
    p = hn::MulAdd(x2, p, hn::Set(d, -2.95459980854025e-03f));
    p = hn::MulAdd(x2, p, hn::Set(d, -1.60960333262415e-02f));
    p = hn::Mul(xc, p);
    V q = hn::MulAdd(x2, hn::Set(d, -1.45660718464996e-05f), hn::Set(d, -2.13374055278905e-04f));
    q = hn::MulAdd(x2, q, hn::Set(d, -1.68282697438203e-03f));
    q = hn::MulAdd(x2, q, hn::Set(d, -7.37332916720468e-03f));
    q = hn::MulAdd(x2, q, hn::Set(d, -1.42647390514189e-02f));
    // erf(x) rounds to +-1 in float32 from |x| = 3.92 on.
    const V r = hn::IfThenElse(hn::Ge(hn::Abs(x), K(d, 3.92)), hn::CopySign(K(d, 1.0), x), hn::Div(p, q));
    return math_internal::KeepNaN(d, x, r);
  } else {
    return math_internal::PerLane(d, x, [](double v) { return std::erf(v); });
  }
}

// x * sigmoid(x) (SiLU, swish).
template <class D, class V>
HWY_INLINE V Silu(D d, V x) {
  using T = hn::TFromD<D>;
  // -inf * sigmoid(-inf) is -0, as the limit.
  const V xc = hn::Max(x, hn::Set(d, std::numeric_limits<T>::lowest()));
  return math_internal::KeepNaN(d, x, hn::Mul(xc, toolkit::Sigmoid(d, x)));
}

// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x).
template <class D, class V>
HWY_INLINE V SiluGrad(D d, V x) {
  using math_internal::K;
  V s, one_minus_s;
  math_internal::SigmoidPair(d, x, &s, &one_minus_s);
  // Past |x| = 200, s (1 - s) is 0 and x may be infinite.
  const V xc = hn::Min(hn::Max(x, K(d, -200.0)), K(d, 200.0));
  return math_internal::KeepNaN(d, x, hn::MulAdd(hn::Mul(s, xc), one_minus_s, s));
}

// GELU, exact form: 0.5 x (1 + erf(x / sqrt(2))), torch's approximate='none'.
// float32 as written (the tail below -5.5 is 0); float64 as 0.5 x erfc(-x /
// sqrt(2)) with std::erfc, lane by lane, exact down to the subnormals.
template <class D, class V>
HWY_INLINE V GeluErf(D d, V x) {
  using math_internal::K;
  const V half_x = hn::Mul(K(d, 0.5), x);
  if constexpr (math_internal::IsF32<D>()) {
    const V t = toolkit::Erf(d, hn::Mul(x, K(d, math_internal::kInvSqrt2)));
    const V xc = hn::Max(half_x, hn::Set(d, std::numeric_limits<float>::lowest()));  // -inf gives 0
    return math_internal::KeepNaN(d, x, hn::MulAdd(xc, t, xc));
  } else {
    const V c = math_internal::PerLane(d, hn::Mul(x, K(d, -math_internal::kInvSqrt2)),
                                       [](double v) { return std::erfc(v); });
    const V xc = hn::Max(half_x, hn::Set(d, std::numeric_limits<double>::lowest()));
    return math_internal::KeepNaN(d, x, hn::Mul(xc, c));
  }
}

namespace math_internal {

// tanh's argument in the tanh form, sqrt(2 / pi) (x + 0.044715 x^3).
template <class D, class V>
HWY_INLINE V TanhArgument(D d, V x) {
  const V x2 = hn::Mul(x, x);
  const V inner = hn::MulAdd(hn::Mul(K(d, kTanhCubic), x2), x, x);
  return hn::Mul(K(d, kSqrt2OverPi), inner);
}

}  // namespace math_internal

// GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715
// x^3), torch's approximate='tanh', evaluated as x sigmoid(2 u): no
// cancellation where tanh(u) is close to -1.
template <class D, class V>
HWY_INLINE V GeluTanh(D d, V x) {
  using T = hn::TFromD<D>;
  V s, one_minus_s;
  math_internal::SigmoidPair(d, hn::Mul(math_internal::K(d, 2.0), math_internal::TanhArgument(d, x)), &s,
                             &one_minus_s);
  const V xc = hn::Max(x, hn::Set(d, std::numeric_limits<T>::lowest()));
  return math_internal::KeepNaN(d, x, hn::Mul(xc, s));
}

// d GeluErf / dx = Phi(x) + x phi(x). float32: one exp serves both terms:
// e = exp(-x^2 / 2) gives phi = e / sqrt(2 pi) and, by Abramowitz and Stegun
// 7.1.26, 0.5 erfc(|x| / sqrt(2)) = 0.5 t P(t) e. float64: std::erfc.
template <class D, class V>
HWY_INLINE V GeluErfGrad(D d, V x) {
  using math_internal::K;
  const V half = K(d, 0.5);
  const V one = K(d, 1.0);
  // Past |x| = 40, e is 0 and x may be infinite.
  const V xc = hn::Min(hn::Max(x, K(d, -40.0)), K(d, 40.0));
  const V e = math_internal::ExpBounded(d, hn::Mul(hn::Neg(half), hn::Mul(xc, xc)));
  const V pdf_term = hn::Mul(hn::Mul(xc, K(d, math_internal::kInvSqrt2Pi)), e);
  V cdf;
  if constexpr (math_internal::IsF32<D>()) {
    const V t =
        hn::Div(one, hn::MulAdd(K(d, math_internal::kErfcP * math_internal::kInvSqrt2), hn::Abs(xc), one));
    V poly = hn::MulAdd(t, K(d, math_internal::kErfcA[4]), K(d, math_internal::kErfcA[3]));
    poly = hn::MulAdd(t, poly, K(d, math_internal::kErfcA[2]));
    poly = hn::MulAdd(t, poly, K(d, math_internal::kErfcA[1]));
    poly = hn::MulAdd(t, poly, K(d, math_internal::kErfcA[0]));
    const V tail = hn::Mul(hn::Mul(half, hn::Mul(t, poly)), e);  // 0.5 erfc(|x| / sqrt(2))
    cdf = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), tail, hn::Sub(one, tail));
  } else {
    cdf = hn::Mul(half, math_internal::PerLane(d, hn::Mul(x, K(d, -math_internal::kInvSqrt2)),
                                               [](double v) { return std::erfc(v); }));
  }
  return math_internal::KeepNaN(d, x, hn::Add(cdf, pdf_term));
}

// d GeluTanh / dx = s + 2 x s (1 - s) sqrt(2 / pi) (1 + 3 * 0.044715 x^2),
// s = sigmoid(2 u), 1 - s without cancellation (SigmoidPair).
template <class D, class V>
HWY_INLINE V GeluTanhGrad(D d, V x) {
  using math_internal::K;
  const V one = K(d, 1.0);
  V s, one_minus_s;
  math_internal::SigmoidPair(d, hn::Mul(K(d, 2.0), math_internal::TanhArgument(d, x)), &s, &one_minus_s);
  // Past |x| = 30, s (1 - s) is 0 and x may be infinite.
  const V xc = hn::Min(hn::Max(x, K(d, -30.0)), K(d, 30.0));
  const V slope = hn::MulAdd(K(d, 3.0 * math_internal::kTanhCubic), hn::Mul(xc, xc), one);
  const V ds = hn::Mul(hn::Mul(K(d, 2.0 * math_internal::kSqrt2OverPi), slope), hn::Mul(s, one_minus_s));
  return math_internal::KeepNaN(d, x, hn::MulAdd(xc, ds, s));
}

}  // namespace toolkit
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)
