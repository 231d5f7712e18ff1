// scaled_clamp kernels, vectorized with Highway (one pass over memory),
// compiled once per SIMD target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scaled_clamp/kernel.cpp"
#include "ops/scaled_clamp/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "opbridge/checks.h"
#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/scaled_clamp/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::ReadLanes;
using simd::ReadTail;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

// Compares rather than hn::Min/Max, whose NaN handling differs by target:
// as std::min(std::max(v, lo), hi), NaN propagates and min_val > max_val
// gives max_val, as in torch.clamp.
template <class D, class V>
HWY_INLINE V Clamp(D /*d*/, V v, V lo, V hi) {
  const V low = hn::IfThenElse(hn::Lt(v, lo), lo, v);
  return hn::IfThenElse(hn::Lt(hi, low), hi, low);
}

template <typename T>
void ForwardRange(const T* x, T* y, int64_t begin, int64_t end, double scale, double min_val, double max_val,
                  bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, static_cast<C>(scale));
  const auto lo = hn::Set(d, static_cast<C>(min_val));
  const auto hi = hn::Set(d, static_cast<C>(max_val));
  int64_t i = begin;
  auto loop = [&](auto write) {
    for (; i + 2 * lanes <= end; i += 2 * lanes) {
      const auto v0 = Clamp(d, hn::Mul(ReadLanes(d, x + i), s), lo, hi);
      const auto v1 = Clamp(d, hn::Mul(ReadLanes(d, x + i + lanes), s), lo, hi);
      write(v0, y + i);
      write(v1, y + i + lanes);
    }
    for (; i + lanes <= end; i += lanes) write(Clamp(d, hn::Mul(ReadLanes(d, x + i), s), lo, hi), y + i);
  };
  if (stream && AlignedFor(d, y + i)) {
    loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
    hwy::FlushStream();
  } else {
    loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
  }
  if (i < end) {
    alignas(64) T buffer[kMaxLanes];
    const auto v = Clamp(d, hn::Mul(ReadTail(d, x + i, end - i, buffer), s), lo, hi);
    WriteTail(d, v, y + i, end - i, buffer);
  }
}

template <typename T>
void BackwardRange(const T* grad_y, const T* x, T* grad_x, int64_t begin, int64_t end, double scale,
                   double min_val, double max_val, bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, static_cast<C>(scale));
  const auto lo = hn::Set(d, static_cast<C>(min_val));
  const auto hi = hn::Set(d, static_cast<C>(max_val));
  // grad_y * scale where min_val <= x * scale <= max_val (inclusive, as torch.clamp), else 0.
  auto grad = [&](auto g, auto xv) {
    const auto v = hn::Mul(xv, s);
    return hn::IfThenElseZero(hn::And(hn::Ge(v, lo), hn::Le(v, hi)), hn::Mul(g, s));
  };
  int64_t i = begin;
  if (stream && AlignedFor(d, grad_x + i)) {
    for (; i + lanes <= end; i += lanes)
      WriteLanesStream(d, grad(ReadLanes(d, grad_y + i), ReadLanes(d, x + i)), grad_x + i);
    hwy::FlushStream();
  }
  for (; i + lanes <= end; i += lanes)
    WriteLanes(d, grad(ReadLanes(d, grad_y + i), ReadLanes(d, x + i)), grad_x + i);
  if (i < end) {
    alignas(64) T buffer[kMaxLanes];
    const auto g = ReadTail(d, grad_y + i, end - i, buffer);
    const auto xv = ReadTail(d, x + i, end - i, buffer);
    WriteTail(d, grad(g, xv), grad_x + i, end - i, buffer);
  }
}

}  // namespace

#define OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS(T, Suffix)                                                       \
  void ScaledClampForwardRange##Suffix(const T* x, T* y, int64_t begin, int64_t end, double scale,          \
                                       double min_val, double max_val, bool stream) {                       \
    ForwardRange<T>(x, y, begin, end, scale, min_val, max_val, stream);                                     \
  }                                                                                                         \
  void ScaledClampBackwardRange##Suffix(const T* grad_y, const T* x, T* grad_x, int64_t begin, int64_t end, \
                                        double scale, double min_val, double max_val, bool stream) {        \
    BackwardRange<T>(grad_y, x, grad_x, begin, end, scale, min_val, max_val, stream);                       \
  }
OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS(float, F32)
OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS(double, F64)
OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS(Float16, F16)
OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_SCALED_CLAMP_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(ScaledClampForwardRangeF32);
HWY_EXPORT(ScaledClampForwardRangeF64);
HWY_EXPORT(ScaledClampForwardRangeF16);
HWY_EXPORT(ScaledClampForwardRangeBF16);
HWY_EXPORT(ScaledClampBackwardRangeF32);
HWY_EXPORT(ScaledClampBackwardRangeF64);
HWY_EXPORT(ScaledClampBackwardRangeF16);
HWY_EXPORT(ScaledClampBackwardRangeBF16);

namespace {

constexpr int64_t kElementGrain = 1 << 15;

template <typename T>
struct RangeKernels;
#define OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS(T, Suffix)                                           \
  template <>                                                                                    \
  struct RangeKernels<T> {                                                                       \
    static void Forward(const T* x, T* y, int64_t begin, int64_t end, const ScaledClampAttrs& a, \
                        bool stream) {                                                           \
      OPBRIDGE_DYNAMIC_DISPATCH(ScaledClampForwardRange##Suffix)                                 \
      (x, y, begin, end, a.scale, a.min_val, a.max_val, stream);                                 \
    }                                                                                            \
    static void Backward(const T* grad_y, const T* x, T* grad_x, int64_t begin, int64_t end,     \
                         const ScaledClampAttrs& a, bool stream) {                               \
      OPBRIDGE_DYNAMIC_DISPATCH(ScaledClampBackwardRange##Suffix)                                \
      (grad_y, x, grad_x, begin, end, a.scale, a.min_val, a.max_val, stream);                    \
    }                                                                                            \
  };
OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS(float, F32)
OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS(double, F64)
OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS(Float16, F16)
OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_SCALED_CLAMP_RANGE_KERNELS

// Attributes as the element type sees them (the scalar kernel's
// static_cast<T>), float32 for the 16-bit types.
ScaledClampAttrs Narrowed(const ScaledClampAttrs& attrs, bool is_double) {
  if (is_double) return attrs;
  return {static_cast<float>(attrs.scale), static_cast<float>(attrs.min_val),
          static_cast<float>(attrs.max_val)};
}

}  // namespace

template <typename T>
void ScaledClampForward(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs,
                        const ParallelFor& parallel_for) {
  const ScaledClampAttrs a = Narrowed(attrs, std::is_same_v<T, double>);
  if (std::isnan(a.min_val) || std::isnan(a.max_val)) {
    // torch.clamp propagates a NaN bound to every element.
    const T nan = FromDouble<T>(std::numeric_limits<double>::quiet_NaN());
    std::fill(y, y + n, nan);
    return;
  }
  const bool stream = n * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
  DynamicFor(parallel_for, n, kElementGrain,
             [=](int64_t begin, int64_t end) { RangeKernels<T>::Forward(x, y, begin, end, a, stream); });
}

template <typename T>
void ScaledClampBackward(const T* grad_y, const T* x, T* grad_x, int64_t n, const ScaledClampAttrs& attrs,
                         const ParallelFor& parallel_for) {
  const ScaledClampAttrs a = Narrowed(attrs, std::is_same_v<T, double>);
  const bool stream = n * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
  DynamicFor(parallel_for, n, kElementGrain, [=](int64_t begin, int64_t end) {
    RangeKernels<T>::Backward(grad_y, x, grad_x, begin, end, a, stream);
  });
}

Status LaunchScaledClamp(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  const int64_t n = NumElements(args.input_infos[0].shape);
  return DispatchFloatingOrHalf(kScaledClampSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    ScaledClampForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), n, attrs,
                          args.parallel_for);
  });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void ScaledClampForward<T>(const T*, T*, int64_t, const ScaledClampAttrs&, const ParallelFor&); \
  template void ScaledClampBackward<T>(const T*, const T*, T*, int64_t, const ScaledClampAttrs&,           \
                                       const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

// Backward inputs: grad_y, x; output: grad_x.
Status LaunchScaledClampBackward(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  return DispatchFloatingOrHalf(kScaledClampSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    ScaledClampBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                           static_cast<T*>(args.outputs[0]), NumElements(args.input_infos[1].shape), attrs,
                           args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
