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
template <class D>
HWY_INLINE hn::VFromD<D> ReadLanes(D d, const Float16* p) {
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

template <class D>
HWY_INLINE void WriteLanes(D d, hn::VFromD<D> v, float* p) {
  hn::StoreU(v, d, p);
}
template <class D>
HWY_INLINE void WriteLanes(D d, hn::VFromD<D> v, double* p) {
  hn::StoreU(v, d, p);
}
template <class D>
HWY_INLINE void WriteLanes(D /*d*/, hn::VFromD<D> v, Float16* p) {
  const hn::Rebind<hwy::float16_t, D> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
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
#define OPBRIDGE_DYNAMIC_DISPATCH(FUNC_NAME) \
  (*(HWY_DISPATCH_TABLE(FUNC_NAME)[::opbridge::SimdDispatchIndex()]))
#endif
