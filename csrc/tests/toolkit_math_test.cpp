// The toolkit's vector math (opbridge/toolkit/math-inl.h, trig-inl.h) against libm in
// double (float32) and long double (float64), on every SIMD target this CPU
// runs: a dense sweep of each type's range, the extremes, +-inf and NaN. The
// bounds asserted here are the ones math-inl.h and the fast-kernels guide
// document.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/toolkit_math_test.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/toolkit/math-inl.h"
#include "opbridge/toolkit/trig-inl.h"

#ifndef OPBRIDGE_TOOLKIT_MATH_TEST_FUNCTIONS_
#define OPBRIDGE_TOOLKIT_MATH_TEST_FUNCTIONS_
namespace opbridge {
namespace toolkit_math_test {
enum Function {
  kExp,
  kLog,
  kTanh,
  kSigmoid,
  kErf,
  kSilu,
  kSiluGrad,
  kGeluErf,
  kGeluErfGrad,
  kGeluTanh,
  kGeluTanhGrad,
  kExpFast,
  kSin,
  kCos,
  kNumFunctions
};
}  // namespace toolkit_math_test
}  // namespace opbridge
#endif

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;
using toolkit_math_test::Function;

template <class D, class V>
HWY_INLINE V Apply(D d, Function fn, V x) {
  switch (fn) {
    case toolkit_math_test::kExp:
      return tk::Exp(d, x);
    case toolkit_math_test::kLog:
      return tk::Log(d, x);
    case toolkit_math_test::kTanh:
      return tk::Tanh(d, x);
    case toolkit_math_test::kSigmoid:
      return tk::Sigmoid(d, x);
    case toolkit_math_test::kErf:
      return tk::Erf(d, x);
    case toolkit_math_test::kSilu:
      return tk::Silu(d, x);
    case toolkit_math_test::kSiluGrad:
      return tk::SiluGrad(d, x);
    case toolkit_math_test::kGeluErf:
      return tk::GeluErf(d, x);
    case toolkit_math_test::kGeluErfGrad:
      return tk::GeluErfGrad(d, x);
    case toolkit_math_test::kGeluTanh:
      return tk::GeluTanh(d, x);
    case toolkit_math_test::kGeluTanhGrad:
      return tk::GeluTanhGrad(d, x);
    case toolkit_math_test::kExpFast:
      return tk::ExpFast(d, x);
    case toolkit_math_test::kSin:
      return tk::Sin(d, x);
    case toolkit_math_test::kCos: {
      V s, c;
      tk::SinCos(d, x, &s, &c);  // Cos through SinCos: both paths measured
      return hn::Add(c, hn::Mul(s, hn::Zero(d)));
    }
    default:
      return x;
  }
}

// n is a multiple of every target's lane count (the callers pad).
template <typename T>
void EvalImpl(int fn, const T* x, T* y, size_t n) {
  const hn::ScalableTag<T> d;
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(Apply(d, static_cast<Function>(fn), hn::LoadU(d, x + i)), d, y + i);
  }
}

// 16-bit storage: widened to float32 lanes, rounded once on the way out.
template <typename T>
void EvalHalfImpl(int fn, const T* x, T* y, size_t n) {
  const hn::ScalableTag<float> d;
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    simd::WriteLanes(d, Apply(d, static_cast<Function>(fn), simd::ReadLanes(d, x + i)), y + i);
  }
}

// float32 lanes stored as float16 (the toolkit's rounding store).
void StoreHalfImpl(const float* x, Float16* y, size_t n) {
  const hn::ScalableTag<float> d;
  for (size_t i = 0; i < n; i += hn::Lanes(d)) simd::WriteLanes(d, hn::LoadU(d, x + i), y + i);
}

}  // namespace

void StoreF16(const float* x, Float16* y, size_t n) { StoreHalfImpl(x, y, n); }
void EvalF32(int fn, const float* x, float* y, size_t n) { EvalImpl(fn, x, y, n); }
void EvalF64(int fn, const double* x, double* y, size_t n) { EvalImpl(fn, x, y, n); }
void EvalBF16(int fn, const BFloat16* x, BFloat16* y, size_t n) { EvalHalfImpl(fn, x, y, n); }
void EvalF16(int fn, const Float16* x, Float16* y, size_t n) { EvalHalfImpl(fn, x, y, n); }

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "opbridge/simd.h"
#include "tests/test_util.h"

namespace opbridge {

HWY_EXPORT(EvalF32);
HWY_EXPORT(EvalF64);
HWY_EXPORT(EvalBF16);
HWY_EXPORT(EvalF16);
HWY_EXPORT(StoreF16);

namespace toolkit_math_test {
namespace {

using LD = long double;

constexpr LD kInvSqrt2 = 0.707106781186547524400844362104849039L;
constexpr LD kInvSqrt2Pi = 0.398942280401432677939946059934381868L;
constexpr LD kSqrt2OverPi = 0.797884560802865355879892119868763737L;

LD SigmoidRef(LD x) { return 1.0L / (1.0L + std::exp(-x)); }

// The exact functions, in long double (libm's long double functions).
LD Reference(Function fn, LD x) {
  switch (fn) {
    case kExp:
    case kExpFast:
      return std::exp(x);
    case kLog:
      return std::log(x);
    case kTanh:
      return std::tanh(x);
    case kSigmoid:
      return SigmoidRef(x);
    case kErf:
      return std::erf(x);
    case kSilu:
      return std::isinf(x) ? (x > 0 ? x : 0.0L) : x * SigmoidRef(x);
    case kSiluGrad: {
      if (std::isinf(x)) return x > 0 ? 1.0L : 0.0L;
      const LD s = SigmoidRef(x);
      return s * (1.0L + x * (1.0L - s));
    }
    case kGeluErf:
      return std::isinf(x) ? (x > 0 ? x : 0.0L) : 0.5L * x * std::erfc(-x * kInvSqrt2);
    case kGeluErfGrad:
      if (std::isinf(x)) return x > 0 ? 1.0L : 0.0L;
      return 0.5L * std::erfc(-x * kInvSqrt2) + x * kInvSqrt2Pi * std::exp(-0.5L * x * x);
    case kGeluTanh:
    case kGeluTanhGrad: {
      if (std::isinf(x)) return fn == kGeluTanh ? (x > 0 ? x : 0.0L) : (x > 0 ? 1.0L : 0.0L);
      const LD u = kSqrt2OverPi * (x + 0.044715L * x * x * x);
      const LD s = 1.0L / (1.0L + std::exp(-2.0L * u));
      if (fn == kGeluTanh) return x * s;
      return s + 2.0L * x * s * (1.0L - s) * kSqrt2OverPi * (1.0L + 3.0L * 0.044715L * x * x);
    }
    case kSin:
      return std::sin(x);
    case kCos:
      return std::cos(x);
    default:
      return x;
  }
}

const char* Name(Function fn) {
  static const char* const kNames[] = {"Exp",          "Log",      "Tanh",    "Sigmoid",     "Erf",
                                       "Silu",         "SiluGrad", "GeluErf", "GeluErfGrad", "GeluTanh",
                                       "GeluTanhGrad", "ExpFast",  "Sin",     "Cos"};
  return kNames[fn];
}

// A result passes when it is within `ulp` units in the last place of the
// exact result, or within abs * max(1, |x|) of it (what matters where the
// result is near zero and the function's own terms cancel). The table of
// math-inl.h and of docs/guides/fast-kernels.md.
struct Bound {
  double ulp;
  double abs;
};
struct Bounds {
  Bound f32;
  Bound f64;
};
// float64 rows with ulp 1 and abs 0 where the function is libm's, lane by lane.
const Bounds kBounds[kNumFunctions] = {
    /* Exp          */ {{1, 0}, {3, 0}},  // float64: 1 ulp up to 700, (e^(x/2))^2 beyond
    /* Log          */ {{1, 0}, {1, 0}},
    /* Tanh         */ {{7, 0}, {3, 0}},
    /* Sigmoid      */ {{3, 0}, {3, 0}},
    /* Erf          */ {{7, 1e-7}, {1, 0}},
    /* Silu         */ {{4, 1e-37}, {4, 1e-307}},  // abs: where sigmoid(x) is subnormal
    /* SiluGrad     */ {{4, 4e-7}, {4, 1e-15}},
    /* GeluErf      */ {{4, 2e-7}, {2, 1e-16}},
    /* GeluErfGrad  */ {{4, 4e-7}, {2, 4e-16}},
    /* GeluTanh     */ {{4, 1e-7}, {4, 1e-15}},
    /* GeluTanhGrad */ {{4, 4e-7}, {4, 1e-15}},
    /* ExpFast      */ {{2, 2.8e-40}, {3, 0}},   // abs * max(1, |x|): 0 below 2^-125 (x < -86.64)
    /* Sin          */ {{3, 1e-7}, {3, 5e-16}},  // trig-inl.h's table
    /* Cos          */ {{3, 1e-7}, {3, 5e-16}},
};

template <typename T>
LD UlpOf(LD exact) {
  const LD a = std::fabs(exact);
  const LD smallest = std::numeric_limits<T>::denorm_min();
  if (a < static_cast<LD>(std::numeric_limits<T>::min())) return smallest;
  int exponent = 0;
  std::frexp(a, &exponent);  // a = m 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0L, exponent - std::numeric_limits<T>::digits);
}

// Inputs: every 4099th float32 bit pattern (both signs, all exponents), a
// uniform grid on [-12, 12], and the special values. float64: random bit
// patterns, grids on [-12, 12] and [-750, 750], and the special values.
template <typename T>
std::vector<T> Sweep() {
  std::vector<T> x;
  if constexpr (std::is_same_v<T, float>) {
    for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 16411) {
      const uint32_t b = static_cast<uint32_t>(bits);
      float v;
      std::memcpy(&v, &b, sizeof(v));
      x.push_back(v);
    }
    for (int i = -60000; i <= 60000; ++i) x.push_back(static_cast<float>(i) * 2e-4f);
    for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 1.9503f);  // Sin, Cos: +-39006
  } else {
    std::mt19937_64 gen(7);
    for (int i = 0; i < 40000; ++i) {
      const uint64_t b = gen();
      double v;
      std::memcpy(&v, &b, sizeof(v));
      x.push_back(v);
    }
    for (int i = -30000; i <= 30000; ++i) x.push_back(static_cast<double>(i) * 4e-4);
    for (int i = -15000; i <= 15000; ++i) x.push_back(static_cast<double>(i) * 5e-2);
  }
  using L = std::numeric_limits<T>;
  for (T v : {T(0),
              L::min(),
              L::denorm_min(),
              L::max(),
              L::infinity(),
              L::quiet_NaN(),
              L::epsilon(),
              T(88.72),
              T(88.73),
              T(103.9),
              T(704),
              T(706.5),
              T(709.7),
              T(709.8),
              T(-87.3),
              T(-103.9),
              T(-745.1),
              T(-745.2),
              T(3.92),
              T(5.54),
              T(9.1),
              T(19.1),
              T(1e-30),
              T(1.5707963267948966),
              T(3.141592653589793),
              T(6.283185307179586),
              T(38999.9),
              T(39000),
              T(39000.1),
              T(1e6),
              T(1e20)}) {
    x.push_back(v);
    x.push_back(-v);
  }
  while (x.size() % 64 != 0) x.push_back(T(1));
  return x;
}

template <typename T>
void Eval(int fn, const std::vector<T>& x, std::vector<T>* y) {
  if constexpr (std::is_same_v<T, float>) {
    OPBRIDGE_DYNAMIC_DISPATCH(EvalF32)(fn, x.data(), y->data(), x.size());
  } else {
    OPBRIDGE_DYNAMIC_DISPATCH(EvalF64)(fn, x.data(), y->data(), x.size());
  }
}

using opbridge::testing::ForcedTarget;

template <typename T>
void CheckAllFunctions() {
  const std::vector<T> x = Sweep<T>();
  std::vector<T> y(x.size());
  for (int f = 0; f < kNumFunctions; ++f) {
    const Function fn = static_cast<Function>(f);
    const Bound bound = std::is_same_v<T, float> ? kBounds[f].f32 : kBounds[f].f64;
    std::vector<LD> exact(x.size());
    for (size_t i = 0; i < x.size(); ++i) exact[i] = Reference(fn, static_cast<LD>(x[i]));
    for (const std::string& target : SimdTargets()) {
      ForcedTarget forced(target);
      Eval(f, x, &y);
      double worst_ulp = 0.0;  // over the results outside the absolute bound
      T worst_x = 0;
      int failures = 0;
      std::ostringstream first_failures;
      for (size_t i = 0; i < x.size(); ++i) {
        const LD want = static_cast<LD>(static_cast<T>(exact[i]));  // rounded: the best T can hold
        const LD got = static_cast<LD>(y[i]);
        bool ok;
        if (std::isnan(exact[i]) || std::isnan(got)) {
          ok = std::isnan(exact[i]) && std::isnan(got);
        } else if (std::isinf(want) || std::isinf(got)) {
          ok = want == got;
        } else {
          const LD err = std::fabs(got - exact[i]);
          const double ulps = static_cast<double>(err / UlpOf<T>(exact[i]));
          const LD abs_bound =
              static_cast<LD>(bound.abs) * std::max<LD>(1.0L, std::fabs(static_cast<LD>(x[i])));
          ok = ulps <= bound.ulp || err <= abs_bound;
          if (err > abs_bound && ulps > worst_ulp) {
            worst_ulp = ulps;
            worst_x = x[i];
          }
        }
        if (!ok && failures++ < 5) {
          first_failures << "\n  x = " << static_cast<double>(x[i]) << ": got " << static_cast<double>(got)
                         << ", exact " << static_cast<double>(exact[i]);
        }
      }
      EXPECT_EQ(failures, 0) << Name(fn) << " on " << target << ": " << failures << " of " << x.size()
                             << " results outside " << bound.ulp << " ulp / " << bound.abs << " abs"
                             << first_failures.str();
      if (std::getenv("OPBRIDGE_MATH_REPORT") != nullptr) {
        std::printf("%-13s %-8s max %.2f ulp (at x = %g) outside abs %g\n", Name(fn), target.c_str(),
                    worst_ulp, static_cast<double>(worst_x), bound.abs);
      }
    }
  }
}

TEST(ToolkitMath, Float32WithinDocumentedBoundsOnEveryTarget) { CheckAllFunctions<float>(); }

TEST(ToolkitMath, Float64WithinDocumentedBoundsOnEveryTarget) { CheckAllFunctions<double>(); }

// The 16-bit path of Sin and Cos: each of the 65536 values of bfloat16 and
// of float16, widened to float32 lanes, computed and rounded once, is within
// one unit in the last place of the 16-bit type of the exact result (NaN and
// +-inf give NaN), on every target.
template <typename T>
void CheckHalfTrig(int digits, long double min_normal, long double denorm_min, const char* type) {
  std::vector<T> x(65536), y(65536);
  for (uint32_t b = 0; b < 65536; ++b) x[b].bits = static_cast<uint16_t>(b);
  for (Function fn : {kSin, kCos}) {
    for (const std::string& target : SimdTargets()) {
      ForcedTarget forced(target);
      if constexpr (std::is_same_v<T, BFloat16>) {
        OPBRIDGE_DYNAMIC_DISPATCH(EvalBF16)(fn, x.data(), y.data(), x.size());
      } else {
        OPBRIDGE_DYNAMIC_DISPATCH(EvalF16)(fn, x.data(), y.data(), x.size());
      }
      int failures = 0;
      std::ostringstream first;
      for (size_t i = 0; i < x.size(); ++i) {
        const LD in = static_cast<LD>(ToFloat(x[i]));
        const LD got = static_cast<LD>(ToFloat(y[i]));
        bool ok;
        if (std::isnan(in) || std::isinf(in)) {
          ok = std::isnan(got);
        } else {
          const LD exact = Reference(fn, in);
          const LD a = std::fabs(exact);
          int exponent = 0;
          std::frexp(a, &exponent);
          const LD ulp = a < min_normal ? denorm_min : std::ldexp(1.0L, exponent - digits);
          ok = std::fabs(got - exact) <= ulp;
        }
        if (!ok && failures++ < 5) {
          first << "\n  x = " << static_cast<double>(in) << ": got " << static_cast<double>(got);
        }
      }
      EXPECT_EQ(failures, 0) << Name(fn) << " of " << type << " on " << target << ": " << failures
                             << " of 65536 beyond 1 ulp" << first.str();
    }
  }
}

TEST(ToolkitMath, SinCosOfEveryBFloat16AndFloat16WithinOneUlpOnEveryTarget) {
  CheckHalfTrig<BFloat16>(8, std::ldexp(1.0L, -126), std::ldexp(1.0L, -133), "bfloat16");
  CheckHalfTrig<Float16>(11, std::ldexp(1.0L, -14), std::ldexp(1.0L, -24), "float16");
}

// The toolkit's float16 loads and stores are IEEE's on every target, also
// where Highway converts arithmetically (no F16C): each of the 65536 values
// loads and stores back as itself (inf stays inf, NaN stays NaN), and
// float32 values store as half.h's scalar conversion rounds them (to nearest
// even, overflow to inf, subnormals).
TEST(ToolkitMath, Float16LoadsAndStoresAreIeeeOnEveryTarget) {
  std::vector<Float16> x(65536), y(65536);
  for (uint32_t b = 0; b < 65536; ++b) x[b].bits = static_cast<uint16_t>(b);
  std::vector<float> wide;
  std::mt19937 gen(11);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = (gen() & 0x8FFFFFFFu) | ((96u + gen() % 64u) << 23);  // 2^-31 .. 2^32
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    wide.push_back(v);
  }
  for (float v : {65504.0f, 65519.0f, 65520.0f, 1e9f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1.0009766f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    wide.push_back(v);
    wide.push_back(-v);
  }
  while (wide.size() % 64 != 0) wide.push_back(0.0f);
  std::vector<Float16> stored(wide.size());
  for (const std::string& target : SimdTargets()) {
    ForcedTarget forced(target);
    OPBRIDGE_DYNAMIC_DISPATCH(EvalF16)(kNumFunctions, x.data(), y.data(), x.size());  // the identity
    int failures = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool nan = std::isnan(ToFloat(x[i]));
      const bool same = nan ? std::isnan(ToFloat(y[i])) : y[i].bits == x[i].bits;
      if (!same && failures++ < 3)
        ADD_FAILURE() << target << ": float16 bits " << x[i].bits << " -> " << y[i].bits;
    }
    OPBRIDGE_DYNAMIC_DISPATCH(StoreF16)(wide.data(), stored.data(), wide.size());
    for (size_t i = 0; i < wide.size(); ++i) {
      const Float16 want = ToFloat16(wide[i]);
      const bool same = std::isnan(wide[i]) ? std::isnan(ToFloat(stored[i])) : stored[i].bits == want.bits;
      if (!same && failures++ < 6) {
        ADD_FAILURE() << target << ": " << wide[i] << " stored as " << stored[i].bits << ", not "
                      << want.bits;
      }
    }
    EXPECT_EQ(failures, 0) << target;
  }
}

// The edge cases a kernel relies on, exactly.
TEST(ToolkitMath, SpecialValuesAreExact) {
  using L = std::numeric_limits<float>;
  const std::vector<float> x = {0.0f, -0.0f, L::infinity(), -L::infinity(), 1.0f, 100.0f, -100.0f, -1e30f};
  std::vector<float> padded(64, 0.0f), y(64);
  std::copy(x.begin(), x.end(), padded.begin());
  auto run = [&](Function fn) {
    Eval(fn, padded, &y);
    return y;
  };
  auto e = run(kExp);
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[2], L::infinity());
  EXPECT_EQ(e[3], 0.0f);
  auto f = run(kExpFast);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], L::infinity());
  EXPECT_EQ(f[3], 0.0f);
  EXPECT_EQ(f[5], L::infinity());
  EXPECT_EQ(f[6], 0.0f);
  EXPECT_EQ(f[7], 0.0f);
  auto l = run(kLog);
  EXPECT_EQ(l[0], -L::infinity());
  EXPECT_EQ(l[2], L::infinity());
  EXPECT_TRUE(std::isnan(l[3]));
  EXPECT_EQ(l[4], 0.0f);
  auto t = run(kTanh);
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_EQ(t[5], 1.0f);
  EXPECT_TRUE(std::signbit(t[1]));
  auto g = run(kGeluErf);
  EXPECT_EQ(g[2], L::infinity());
  EXPECT_EQ(g[6], 0.0f);
  EXPECT_EQ(g[7], 0.0f);
  auto s = run(kSigmoid);
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_EQ(s[0], 0.5f);
}

// |tanh| <= 1 on every target, also where the exact result is within an
// ulp of 1 (a gradient 1 - tanh^2 must not turn negative): every float32
// from 7 to 12, both signs.
TEST(ToolkitMath, TanhNeverExceedsOne) {
  std::vector<float> x;
  for (float v = 7.0f; v <= 12.0f; v = std::nextafter(v, 13.0f)) {
    x.push_back(v);
    x.push_back(-v);
  }
  x.resize((x.size() + 63) / 64 * 64, 0.0f);
  std::vector<float> y(x.size());
  for (const std::string& target : SimdTargets()) {
    ForcedTarget forced(target);
    Eval(kTanh, x, &y);
    size_t above = 0;
    for (size_t i = 0; i < x.size(); ++i) above += std::fabs(y[i]) > 1.0f;
    EXPECT_EQ(above, 0u) << "Tanh on " << target << ": |tanh(x)| > 1 for " << above << " inputs";
  }
}

}  // namespace
}  // namespace toolkit_math_test
}  // namespace opbridge
#endif  // HWY_ONCE
