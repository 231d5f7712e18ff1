// The elementwise map, per SIMD target: the loop around a user's functor.
//
// Include once per Highway target from a kernel.cpp that includes
// hwy/foreach_target.h (after hwy/highway.h), then define kernels with
// OPBRIDGE_MAP_KERNEL at file scope, outside any namespace:
//
//   OPBRIDGE_MAP_KERNEL(my_ns, SoftCapForward, SoftCap, 1, 1)
//
// instantiates, for every compiled target and for float, double, Float16 and
// BFloat16, the range function of functor my_ns::HWY_NAMESPACE::SoftCap with
// 1 input and 1 output, and once (in the HWY_ONCE pass) the dispatch tables
// and `const opbridge::toolkit::MapKernel my_ns::SoftCapForward`, which
// opbridge::toolkit::Map (opbridge/toolkit/map.h) runs.
//
// The functor: constructed once per task from the launch's
// opbridge::toolkit::Params (or default-constructed if it takes none), then
// called as f(d, in0, in1, ...) with one Highway vector per input (float32
// lanes for float, Float16 and BFloat16, float64 lanes for double) and
// returning the output vector; with two outputs it is called as
// f(d, in0, ..., out0, out1) and assigns both (references).
//
// The loop: vectors two at a time, a partial vector at the end through a
// zero-padded buffer (so every element takes the same code path: the padded
// lanes are computed and thrown away), 16-bit types widened on load and
// rounded to nearest even on store, non-temporal stores for outputs larger
// than the last-level cache, column sums in float32 over 8 rows then double.
#if defined(OPBRIDGE_TOOLKIT_MAP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_TOOLKIT_MAP_INL_H_
#undef OPBRIDGE_TOOLKIT_MAP_INL_H_
#else
#define OPBRIDGE_TOOLKIT_MAP_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/toolkit/map.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace toolkit {

namespace hn = hwy::HWY_NAMESPACE;

// The host-side types, under the per-target name too (tk::Params).
using ::opbridge::toolkit::MapCall;
using ::opbridge::toolkit::Params;

// A vector of `value` in d's lane type (an attribute kept as double).
template <class D>
HWY_INLINE hn::VFromD<D> Set(D d, double value) {
  return hn::Set(d, static_cast<hn::TFromD<D>>(value));
}

namespace map_internal {

// One segment's pointers: inputs and full outputs already at the segment's
// first element; sums (column-sum outputs) at its first column, null where
// the output is full or absent.
template <typename T, int kIn, int kOut>
struct Segment {
  using C = ComputeType<T>;
  const T* in[kIn];
  T* out[kOut];
  C* sum[kOut];
  bool first_row;  // the sums are stored, not added to
};

template <bool kStream, class D, typename T>
HWY_INLINE void Put(D d, hn::VFromD<D> v, T* p) {
  if constexpr (kStream) {
    simd::WriteLanesStream(d, v, p);
  } else {
    simd::WriteLanes(d, v, p);
  }
}

template <class D>
HWY_INLINE void AddToSum(D d, hn::VFromD<D> v, hn::TFromD<D>* s, bool first) {
  hn::StoreU(first ? v : hn::Add(hn::LoadU(d, s), v), d, s);
}

template <bool kStream, class D, typename T, int kIn, int kOut>
HWY_INLINE void Emit(D d, const Segment<T, kIn, kOut>& s, int64_t j, int k, hn::VFromD<D> v) {
  if (s.out[k] != nullptr) Put<kStream>(d, v, s.out[k] + j);
  if (s.sum[k] != nullptr) AddToSum(d, v, s.sum[k] + j, s.first_row);
}

// f applied to the vectors at element j of each input; the outputs emitted.
template <bool kStream, class F, class D, typename T, int kIn, int kOut, size_t... I>
HWY_INLINE void Step(const F& f, D d, const Segment<T, kIn, kOut>& s, int64_t j, std::index_sequence<I...>) {
  if constexpr (kOut == 1) {
    Emit<kStream>(d, s, j, 0, f(d, simd::ReadLanes(d, s.in[I] + j)...));
  } else {
    static_assert(kOut == 2, "a map has one or two outputs");
    hn::VFromD<D> o0 = hn::Zero(d), o1 = hn::Zero(d);
    f(d, simd::ReadLanes(d, s.in[I] + j)..., o0, o1);
    Emit<kStream>(d, s, j, 0, o0);
    Emit<kStream>(d, s, j, 1, o1);
  }
}

// The last, partial vector: inputs copied into zero-padded buffers, outputs
// out of one; column sums take the whole vector (their scratch has room).
template <class F, class D, typename T, int kIn, int kOut, size_t... I>
HWY_INLINE void TailStep(const F& f, D d, const Segment<T, kIn, kOut>& s, int64_t j, int64_t count,
                         std::index_sequence<I...>) {
  alignas(64) T in_buffers[kIn][simd::kMaxLanes];
  alignas(64) T out_buffer[simd::kMaxLanes];
  auto emit = [&](int k, hn::VFromD<D> out) {
    if (s.out[k] != nullptr) simd::WriteTail(d, out, s.out[k] + j, count, out_buffer);
    if (s.sum[k] != nullptr) AddToSum(d, out, s.sum[k] + j, s.first_row);
  };
  if constexpr (kOut == 1) {
    emit(0, f(d, simd::ReadTail(d, s.in[I] + j, count, in_buffers[I])...));
  } else {
    hn::VFromD<D> o0 = hn::Zero(d), o1 = hn::Zero(d);
    f(d, simd::ReadTail(d, s.in[I] + j, count, in_buffers[I])..., o0, o1);
    emit(0, o0);
    emit(1, o1);
  }
}

template <bool kStream, class F, class D, typename T, int kIn, int kOut>
HWY_INLINE void RunSegment(const F& functor, D d, const Segment<T, kIn, kOut>& segment, int64_t length) {
  // Local copies the loop can keep in registers: Highway's stores may alias
  // anything, so members read through a reference would be reloaded (and a
  // parameter converted again) for every vector.
  const F f = functor;
  const Segment<T, kIn, kOut> s = segment;
  const auto inputs = std::make_index_sequence<kIn>();
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + 2 * lanes <= length; j += 2 * lanes) {
    Step<kStream>(f, d, s, j, inputs);
    Step<kStream>(f, d, s, j + lanes, inputs);
  }
  for (; j + lanes <= length; j += lanes) Step<kStream>(f, d, s, j, inputs);
  if (j < length) TailStep(f, d, s, j, length - j, inputs);
}

// Streams when asked and every full output starts vector-aligned. One
// function per functor and dtype, called once per segment (not inlined into
// each of MapRange's three loops: compile time and code size).
template <class F, class D, typename T, int kIn, int kOut>
HWY_NOINLINE bool RunSegmentMaybeStreaming(const F& f, D d, const Segment<T, kIn, kOut>& s, int64_t length,
                                           bool stream) {
  if (stream) {
    bool aligned = true;
    for (int k = 0; k < kOut; ++k) aligned &= s.out[k] == nullptr || simd::AlignedFor(d, s.out[k]);
    if (aligned) {
      RunSegment<true>(f, d, s, length);
      return true;
    }
  }
  RunSegment<false>(f, d, s, length);
  return false;
}

template <class F>
HWY_INLINE F MakeFunctor(const Params& params) {
  if constexpr (std::is_constructible_v<F, const Params&>) {
    return F(params);
  } else {
    (void)params;
    return F{};
  }
}

}  // namespace map_internal

// The range function OPBRIDGE_MAP_KERNEL instantiates: [begin, end) are
// elements, rows or column-sum chunks (see MapCall).
template <typename T, class F, int kIn, int kOut>
void MapRange(const opbridge::toolkit::MapCall& call, int64_t begin, int64_t end) {
  static_assert(kIn >= 1 && kIn <= opbridge::toolkit::kMaxMapInputs, "a map has 1 to 4 inputs");
  static_assert(kOut >= 1 && kOut <= opbridge::toolkit::kMaxMapOutputs, "a map has 1 or 2 outputs");
  using C = ComputeType<T>;
  using Seg = map_internal::Segment<T, kIn, kOut>;
  const hn::ScalableTag<C> d;
  const F f = map_internal::MakeFunctor<F>(call.params);
  const int64_t cols = call.cols;
  const T* inputs[kIn];
  for (int k = 0; k < kIn; ++k) inputs[k] = static_cast<const T*>(call.inputs[k]);
  bool streamed = false;
  // Input k's pointer at row r, column 0.
  auto row_input = [&](int k, int64_t r) {
    return call.input_per_column[k] ? inputs[k] : inputs[k] + r * cols;
  };
  auto row_output = [&](int k, int64_t r) -> T* {
    if (call.outputs[k] == nullptr || call.output_column_sum[k]) return nullptr;
    return static_cast<T*>(call.outputs[k]) + r * cols;
  };
  if (call.sums == nullptr) {
    bool any_per_column = false;
    for (int k = 0; k < kIn; ++k) any_per_column |= call.input_per_column[k];
    if (!any_per_column) {
      // Elements [begin, end) of flat tensors.
      Seg s{};
      for (int k = 0; k < kIn; ++k) s.in[k] = inputs[k] + begin;
      for (int k = 0; k < kOut; ++k)
        s.out[k] = row_output(k, 0) == nullptr ? nullptr : row_output(k, 0) + begin;
      streamed = map_internal::RunSegmentMaybeStreaming(f, d, s, end - begin, call.stream);
    } else {
      for (int64_t r = begin; r < end; ++r) {
        Seg s{};
        for (int k = 0; k < kIn; ++k) s.in[k] = row_input(k, r);
        for (int k = 0; k < kOut; ++k) s.out[k] = row_output(k, r);
        streamed |= map_internal::RunSegmentMaybeStreaming(f, d, s, cols, call.stream);
      }
    }
  } else {
    // Chunks of rows; each column-sum output adds kColumnSumFloatRows rows at
    // a time in C lanes, in row order, then into the chunk's double partials.
    const int64_t padded = cols + simd::kMaxLanes;
    std::vector<C> scratch(static_cast<size_t>(kOut * padded));
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const int64_t full = cols - cols % lanes;
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t row_end = call.sums->RowEnd(chunk);
      for (int64_t block = call.sums->RowBegin(chunk); block < row_end;
           block += opbridge::toolkit::kColumnSumFloatRows) {
        const int64_t block_end = std::min(row_end, block + opbridge::toolkit::kColumnSumFloatRows);
        for (int64_t r = block; r < block_end; ++r) {
          Seg s{};
          for (int k = 0; k < kIn; ++k) s.in[k] = row_input(k, r);
          for (int k = 0; k < kOut; ++k) {
            s.out[k] = row_output(k, r);
            const bool sums = call.outputs[k] != nullptr && call.output_column_sum[k];
            s.sum[k] = sums ? scratch.data() + k * padded : nullptr;
          }
          s.first_row = r == block;
          streamed |= map_internal::RunSegmentMaybeStreaming(f, d, s, cols, call.stream);
        }
        for (int k = 0; k < kOut; ++k) {
          if (call.outputs[k] == nullptr || !call.output_column_sum[k]) continue;
          const C* sums = scratch.data() + k * padded;
          double* partial = call.sums->Partial(call.sum_index[k], chunk);
          int64_t j = 0;
          for (; j < full; j += lanes) simd::AccumulateDouble(d, hn::LoadU(d, sums + j), partial + j);
          if (j < cols) simd::AccumulateDoubleTail(d, hn::LoadU(d, sums + j), partial + j, cols - j);
        }
      }
    }
  }
  if (streamed) hwy::FlushStream();
}

}  // namespace toolkit
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)

// Re-evaluated on every inclusion: expands its argument in the HWY_ONCE pass
// only (the last one, after foreach_target.h's per-target passes).
#undef OPBRIDGE_TOOLKIT_IF_ONCE
#if HWY_ONCE
#define OPBRIDGE_TOOLKIT_IF_ONCE(...) __VA_ARGS__
#else
#define OPBRIDGE_TOOLKIT_IF_ONCE(...)
#endif

#ifndef OPBRIDGE_MAP_KERNEL
// OPBRIDGE_MAP_KERNEL(NAMESPACE, NAME, FUNCTOR, INPUTS, OUTPUTS): see the top
// of this file. NAMESPACE is a plain identifier (the kernel file's own
// namespace, where FUNCTOR lives inside HWY_NAMESPACE); use it at file
// scope, once per kernel, after the functor.
#define OPBRIDGE_MAP_KERNEL(NAMESPACE, NAME, FUNCTOR, INPUTS, OUTPUTS)                                 \
  namespace NAMESPACE {                                                                                \
  namespace HWY_NAMESPACE {                                                                            \
  OPBRIDGE_MAP_INTERNAL_ENTRY(NAME, F32, float, FUNCTOR, INPUTS, OUTPUTS)                              \
  OPBRIDGE_MAP_INTERNAL_ENTRY(NAME, F64, double, FUNCTOR, INPUTS, OUTPUTS)                             \
  OPBRIDGE_MAP_INTERNAL_ENTRY(NAME, F16, ::opbridge::Float16, FUNCTOR, INPUTS, OUTPUTS)                \
  OPBRIDGE_MAP_INTERNAL_ENTRY(NAME, BF16, ::opbridge::BFloat16, FUNCTOR, INPUTS, OUTPUTS)              \
  }                                                                                                    \
  }                                                                                                    \
  OPBRIDGE_TOOLKIT_IF_ONCE(namespace NAMESPACE {                                                       \
    HWY_EXPORT(NAME##F32);                                                                             \
    HWY_EXPORT(NAME##F64);                                                                             \
    HWY_EXPORT(NAME##F16);                                                                             \
    HWY_EXPORT(NAME##BF16);                                                                            \
    [[maybe_unused]] static const ::opbridge::toolkit::MapKernel NAME = {                              \
        #NAME,                                                                                         \
        INPUTS,                                                                                        \
        OUTPUTS,                                                                                       \
        {[]() -> ::opbridge::toolkit::MapRangeFn { return &OPBRIDGE_DYNAMIC_DISPATCH(NAME##F32); },    \
         []() -> ::opbridge::toolkit::MapRangeFn { return &OPBRIDGE_DYNAMIC_DISPATCH(NAME##F64); },    \
         []() -> ::opbridge::toolkit::MapRangeFn { return &OPBRIDGE_DYNAMIC_DISPATCH(NAME##F16); },    \
         []() -> ::opbridge::toolkit::MapRangeFn { return &OPBRIDGE_DYNAMIC_DISPATCH(NAME##BF16); }}}; \
  })                                                                                                   \
  static_assert(true, "")

#define OPBRIDGE_MAP_INTERNAL_ENTRY(NAME, SUFFIX, T, FUNCTOR, INPUTS, OUTPUTS)                       \
  HWY_ATTR void NAME##SUFFIX(const ::opbridge::toolkit::MapCall& call, int64_t begin, int64_t end) { \
    ::opbridge::HWY_NAMESPACE::toolkit::MapRange<T, FUNCTOR, INPUTS, OUTPUTS>(call, begin, end);     \
  }
#endif
