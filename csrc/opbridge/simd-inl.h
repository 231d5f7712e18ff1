// Per-target SIMD helpers shared by the kernels: loads that widen float16 and
// bfloat16 to float32 lanes, stores that round back, and zero-padded partial
// vectors. Included once per Highway target from a kernel.cpp that uses
// foreach_target.h, after hwy/highway.h.
#if defined(OPBRIDGE_CORE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_CORE_SIMD_INL_H_
#undef OPBRIDGE_CORE_SIMD_INL_H_
#else
#define OPBRIDGE_CORE_SIMD_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "opbridge/half.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace simd {

namespace hn = hwy::HWY_NAMESPACE;

// Room for one vector of the widest target (AVX-512: 16 floats).
constexpr int64_t kMaxLanes = 64;

template <class D>
HWY_INLINE hn::VFromD<D> ReadLanes(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::VFromD<D> ReadLanes(D d, const double* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::VFromD<D> ReadLanes(D d, const BFloat16* p) {
  const hn::Rebind<hwy::bfloat16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
}
// Highway widens and narrows float16 arithmetically where the target has no
// F16C (SSE4, SSSE3, the portable targets): +-inf and NaN come out finite,
// and narrowing truncates. The toolkit's float16 loads and stores keep IEEE
// semantics (inf, NaN, rounding to nearest even) on every target.
#undef OPBRIDGE_SIMD_F16_BY_BITS
#if (HWY_ARCH_X86 && (HWY_TARGET >= HWY_SSE4 || defined(HWY_DISABLE_F16C))) || HWY_TARGET == HWY_EMU128 || \
    HWY_TARGET == HWY_SCALAR
#define OPBRIDGE_SIMD_F16_BY_BITS 1
#else
#define OPBRIDGE_SIMD_F16_BY_BITS 0
#endif

template <class D>
HWY_INLINE hn::VFromD<D> ReadLanes(D d, const Float16* p) {
  const hn::Rebind<hwy::float16_t, D> dh;
  const auto wide = hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#if OPBRIDGE_SIMD_F16_BY_BITS
  // Exponent 31 (inf, NaN) widened by its bits: sign, all-ones exponent, mantissa.
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> du16;
  const auto bits = hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  const auto special = hn::Eq(hn::And(bits, hn::Set(du, 0x7C00u)), hn::Set(du, 0x7C00u));
  const auto exact =
      hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))), hn::Set(du, 0x7F800000u)),
             hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x3FFu))));
  return hn::IfThenElse(hn::RebindMask(d, special), hn::BitCast(d, exact), wide);
#else
  return wide;
#endif
}

template <class D>
HWY_INLINE void WriteLanes(D d, hn::VFromD<D> v, float* p) {
  hn::StoreU(v, d, p);
}
template <class D>
HWY_INLINE void WriteLanes(D d, hn::VFromD<D> v, double* p) {
  hn::StoreU(v, d, p);
}
// Rounds to nearest even; overflow gives +-inf, NaN stays NaN.
template <class D>
HWY_INLINE void WriteLanes(D d, hn::VFromD<D> v, Float16* p) {
#if OPBRIDGE_SIMD_F16_BY_BITS
  // half.h's ToFloat16, lane by lane in integer arithmetic; a subnormal
  // result is rounded by the float addition of 0.5 (its mantissa lands in
  // the low bits).
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto magnitude = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto normal = hn::ShiftRight<13>(
      hn::Sub(hn::Add(magnitude,
                      hn::Add(hn::Set(du, 0xFFFu), hn::And(hn::ShiftRight<13>(magnitude), hn::Set(du, 1u)))),
              hn::Set(du, 0x38000000u)));
  const auto subnormal = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, magnitude), hn::Set(d, 0.5f))),
                                 hn::Set(du, 0x3F000000u));
  const auto is_subnormal = hn::Lt(hn::BitCast(di, magnitude), hn::Set(di, 0x38800000));
  const auto is_inf = hn::Lt(hn::Set(di, 0x477FEFFF), hn::BitCast(di, magnitude));
  const auto is_nan = hn::Lt(hn::Set(di, 0x7F800000), hn::BitCast(di, magnitude));
  auto out = hn::IfThenElse(hn::RebindMask(du, is_subnormal), subnormal, normal);
  out = hn::IfThenElse(hn::RebindMask(du, is_inf), hn::Set(du, 0x7C00u), out);
  out = hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Set(du, 0x7E00u), out);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::Or(sign, out))), du16, reinterpret_cast<uint16_t*>(p));
#else
  const hn::Rebind<hwy::float16_t, D> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
#endif
}
// Rounds to nearest even (Highway's bfloat16 DemoteTo truncates); NaN stays NaN.
template <class D>
HWY_INLINE void WriteLanes(D /*d*/, hn::VFromD<D> v, BFloat16* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), lsb)));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x0040));
  const auto out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, out)), du16, reinterpret_cast<uint16_t*>(p));
}

// Non-temporal store where T is the lane type and p is vector-aligned: for
// outputs much larger than the cache, it saves reading each line before it is
// overwritten. Callers check AlignedFor() once per row and call
// hwy::FlushStream() before their range ends.
template <class D, typename T>
HWY_INLINE void WriteLanesStream(D d, hn::VFromD<D> v, T* p) {
  if constexpr (std::is_same_v<T, hn::TFromD<D>>) {
    hn::Stream(v, d, p);
  } else {
    WriteLanes(d, v, p);
  }
}

template <class D, typename T>
HWY_INLINE bool AlignedFor(D d, const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (hn::Lanes(d) * sizeof(hn::TFromD<D>)) == 0;
}

// A partial vector at the end of a range goes through a zero-padded buffer of
// kMaxLanes elements, so every element takes the same vector code path.
template <class D, typename T>
HWY_INLINE hn::VFromD<D> ReadTail(D d, const T* p, int64_t count, T* buffer) {
  std::fill(buffer, buffer + kMaxLanes, T{});
  std::memcpy(static_cast<void*>(buffer), p, static_cast<size_t>(count) * sizeof(T));
  return ReadLanes(d, buffer);
}
template <class D, typename T>
HWY_INLINE void WriteTail(D d, hn::VFromD<D> v, T* p, int64_t count, T* buffer) {
  WriteLanes(d, v, buffer);
  std::memcpy(static_cast<void*>(p), buffer, static_cast<size_t>(count) * sizeof(T));
}

// Adds v (compute lanes) into acc[0 .. Lanes(d)) of doubles.
template <class D>
HWY_INLINE void AccumulateDouble(D /*d*/, hn::VFromD<D> v, double* acc) {
  using C = hn::TFromD<D>;
  if constexpr (std::is_same_v<C, double>) {
    const D dd;
    hn::StoreU(hn::Add(hn::LoadU(dd, acc), v), dd, acc);
  } else {
#if HWY_TARGET == HWY_SCALAR
    const hn::Rebind<double, D> dd;
    hn::StoreU(hn::Add(hn::LoadU(dd, acc), hn::PromoteTo(dd, v)), dd, acc);
#else
    const hn::Repartition<double, D> dd;
    const hn::Half<D> dh;
    const int64_t half = static_cast<int64_t>(hn::Lanes(dd));
    hn::StoreU(hn::Add(hn::LoadU(dd, acc), hn::PromoteTo(dd, hn::LowerHalf(dh, v))), dd, acc);
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + half), hn::PromoteTo(dd, hn::UpperHalf(dh, v))), dd, acc + half);
#endif
  }
}

// Adds the first `count` lanes of v into acc[0 .. count) of doubles.
template <class D>
HWY_INLINE void AccumulateDoubleTail(D d, hn::VFromD<D> v, double* acc, int64_t count) {
  alignas(64) hn::TFromD<D> lanes[kMaxLanes] = {};
  hn::StoreU(v, d, lanes);
  for (int64_t k = 0; k < count; ++k) acc[k] += static_cast<double>(lanes[k]);
}

// v as storage type T would hold it: rounded to T and widened again (the
// identity for float and double), so a value that an unfused computation
// would store in T is used exactly as stored.
template <typename T, class D>
HWY_INLINE hn::VFromD<D> RoundTrip(D d, hn::VFromD<D> v) {
  if constexpr (std::is_same_v<T, Float16>) {
#if OPBRIDGE_SIMD_F16_BY_BITS
    alignas(64) Float16 lanes[kMaxLanes];
    WriteLanes(d, v, lanes);
    return ReadLanes(d, lanes);
#else
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::DemoteTo(dh, v));
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    // Round to nearest even in the upper 16 bits, as WriteLanes does.
    const hn::RebindToUnsigned<D> du;
    const auto bits = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
    const auto upper = hn::Set(du, 0xFFFF0000u);
    const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), lsb)), upper);
    const auto quiet_nan = hn::And(hn::Or(bits, hn::Set(du, 0x00400000u)), upper);
    return hn::BitCast(d, hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded));
  } else {
    (void)d;
    return v;
  }
}

// Elements summed in float lanes before the partial sum moves to double:
// keeps float32 accumulation error far below the float32 tolerances even for
// very long rows.
constexpr int64_t kSumBlock = 1024;

// sum_j x_j^2 in double, element by element: for the rare float32 or
// 16-bit row whose squares overflow float32 (|x| past 1.8e19).
template <typename T>
HWY_INLINE double SumSquaresInDouble(const T* x, int64_t cols) {
  double total = 0.0;
  for (int64_t k = 0; k < cols; ++k) {
    const double v = static_cast<double>(ToFloat(x[k]));
    total += v * v;
  }
  return total;
}

// sum_j x_j^2 and (g not null) sum_j g_j * w_j * x_j over one row of cols
// elements, in float lanes (double for double) flushed to double every
// kSumBlock elements.
template <typename T>
HWY_INLINE void SumSquaresAndDot(const T* x, const T* g, const T* w, int64_t cols, double* sum_squares,
                                 double* dot) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  double total_sq = 0.0, total_dot = 0.0;
  int64_t j = 0;
  const int64_t full = cols - cols % lanes;
  while (j < full) {
    const int64_t block_end = std::min(full, j + kSumBlock);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), t0 = hn::Zero(d), t1 = hn::Zero(d);
    for (; j + 2 * lanes <= block_end; j += 2 * lanes) {
      const auto x0 = ReadLanes(d, x + j), x1 = ReadLanes(d, x + j + lanes);
      s0 = hn::MulAdd(x0, x0, s0);
      s1 = hn::MulAdd(x1, x1, s1);
      if (g != nullptr) {
        t0 = hn::MulAdd(hn::Mul(ReadLanes(d, g + j), ReadLanes(d, w + j)), x0, t0);
        t1 = hn::MulAdd(hn::Mul(ReadLanes(d, g + j + lanes), ReadLanes(d, w + j + lanes)), x1, t1);
      }
    }
    for (; j < block_end; j += lanes) {
      const auto x0 = ReadLanes(d, x + j);
      s0 = hn::MulAdd(x0, x0, s0);
      if (g != nullptr) t0 = hn::MulAdd(hn::Mul(ReadLanes(d, g + j), ReadLanes(d, w + j)), x0, t0);
    }
    total_sq += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1))));
    if (g != nullptr) total_dot += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Add(t0, t1))));
  }
  if (j < cols) {
    const int64_t rest = cols - j;
    const auto x0 = ReadTail(d, x + j, rest, buffer);
    total_sq += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Mul(x0, x0))));
    if (g != nullptr) {
      const auto g0 = ReadTail(d, g + j, rest, buffer);
      const auto w0 = ReadTail(d, w + j, rest, buffer);
      total_dot += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Mul(hn::Mul(g0, w0), x0))));
    }
  }
  if constexpr (!std::is_same_v<C, double>) {
    // A float32 square overflows past |x| = 1.8e19, where the row's root mean
    // square is still a float: such a row (rare; inf and NaN inputs come here
    // too and stay so) is summed again in double.
    if (!std::isfinite(total_sq) || !std::isfinite(total_dot)) {
      total_sq = SumSquaresInDouble(x, cols);
      total_dot = 0.0;
      for (int64_t k = 0; g != nullptr && k < cols; ++k) {
        total_dot += static_cast<double>(ToFloat(g[k])) * static_cast<double>(ToFloat(w[k])) *
                     static_cast<double>(ToFloat(x[k]));
      }
    }
  }
  *sum_squares = total_sq;
  if (dot != nullptr) *dot = total_dot;
}

}  // namespace simd
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)

// Dispatch through opbridge's own target selection (opbridge/simd.h) rather than
// Highway's global one. Use in a kernel's HWY_ONCE section, after HWY_EXPORT.
#ifndef OPBRIDGE_DYNAMIC_DISPATCH
#include "opbridge/simd.h"
namespace opbridge {
inline size_t SimdDispatchIndex() {
  hwy::ChosenTarget chosen;
  chosen.Update(SimdDispatchTargets());
  return chosen.GetIndex();
}
}  // namespace opbridge
#if HWY_IDE || ((HWY_TARGETS & (HWY_TARGETS - 1)) == 0)
// One target compiled (e.g. -march=skylake-avx512, or HWY_COMPILE_ONLY_STATIC):
// HWY_EXPORT's table has that one entry, which Highway's own dispatch calls.
#define OPBRIDGE_DYNAMIC_DISPATCH(FUNC_NAME) HWY_STATIC_DISPATCH(FUNC_NAME)
#else
#define OPBRIDGE_DYNAMIC_DISPATCH(FUNC_NAME) \
  (*(HWY_DISPATCH_TABLE(FUNC_NAME)[::opbridge::SimdDispatchIndex()]))
#endif
#endif
