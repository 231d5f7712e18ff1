// The row-wise reduce-then-map skeleton, per SIMD target: the part of a
// norm-like kernel that is the same for every norm. Include it once per
// Highway target from a kernel.cpp that uses hwy/foreach_target.h, after
// hwy/highway.h; the host side (tensors, parallel loops, dispatch) is
// opbridge/toolkit/rows.h.
//
// A kernel states, per row, a few passes over the row's columns. Each pass
// is a body, a generic lambda called for every vector of columns with the
// descriptor d and the pass's inputs at those columns as compute lanes
// (float32 for float, Float16 and BFloat16; float64 for double). It returns
// what to do with them, any mix of
//
//   Writes(v0, v1, ...)           v_k is stored to the pass's output k
//   Sums(v0, ...)                 v_k is added into the row's sum k
//   SumProducts(a0, b0, ...)      a_k * b_k is added into the row's sum k
//   Columns(v0, ...)              v_k is added into per-column sum k
//   ColumnProducts(a0, b0, ...)   a_k * b_k is added into per-column sum k
//   Maxes(v0, ...)                the row's maximum k is taken over v_k
//
// joined with +. ForColumns runs the pass and returns the row's sums, then
// its maxima, in double. MaxAndSumExp is the online form of a softmax's
// statistics: the row's maximum and the sum of exp(z - maximum) in one pass.
// The skeleton owns the parts every such kernel needs:
//
//   - 16-bit storage: inputs widen to float32 lanes, outputs round to nearest
//     even (on every target, also where Highway's float16 demotion
//     truncates); Round<T>(d, v) gives a value as T would store it, for a
//     fused output that the kernel then uses (x + residual).
//   - Tails: a row whose length is not a multiple of the vector width ends
//     with a zero-padded vector; the terms of the padding lanes are masked to
//     zero, the writes stop at the row's end. The body need not care.
//   - Row sums: float lanes (two accumulators) flushed to double every
//     kSumBlock elements; a row whose float sums overflow (squares past
//     |x| = 1.8e19; inf and NaN inputs) is summed again in double lanes with
//     the same body. A body with sums is therefore also instantiated for
//     double lanes: it makes its constants from d (Set(d, value)), never
//     captures vectors.
//   - Outputs larger than the last-level cache: non-temporal stores where the
//     row's outputs are vector-aligned (RowTensors::stream), flushed at the
//     end of each range.
//   - Prefetch: the next row's inputs are fetched while a pass that writes
//     runs from cache (Pass::Prefetch).
//   - Per-column sums (weight and bias gradients): ForEachRowWithColumnSums
//     gives each range float accumulators per column, moved to the range's
//     double partials (rows.h: ForRowChunksWithColumnSums) every
//     kColumnFlushRows rows, so the totals depend on the shape alone.
//
// A whole kernel (y = x * rsqrt(mean(x^2) + eps) * w):
//
//   template <typename T>
//   void MyNormRows(const RowTensors<T>& t, const RowRange& range) {
//     rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
//       const auto stats = rows::ForColumns(rows::PassOf(t),
//           [](auto, auto x) { return rows::SumProducts(x, x); }, row.in[0]);
//       const double rstd = 1.0 / std::sqrt(stats[0] / t.cols + t.params[0]);
//       rows::ForColumns(rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]),
//           [&](auto d, auto x, auto w) {
//             return rows::Writes(hn::Mul(hn::Mul(x, rows::Set(d, rstd)), w));
//           }, row.in[0], t.columns[0]);
//     });
//   }
//   OPBRIDGE_ROWS_ENTRY_POINTS(MyNormRows, MyNormRows)   // per target
//   ...
//   #if HWY_ONCE
//   OPBRIDGE_ROWS_EXPORT(MyNormRows);                     // once
//   ForRowRanges(rows, cols, parallel_for, [&](const RowRange& r) { MyNormRows<T>(t, r); });
//
// Vectors are kept in std::array: targets with sizeless vectors (SVE, RVV)
// are not supported.
#if defined(OPBRIDGE_TOOLKIT_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_TOOLKIT_ROWS_INL_H_
#undef OPBRIDGE_TOOLKIT_ROWS_INL_H_
#else
#define OPBRIDGE_TOOLKIT_ROWS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/toolkit/math-inl.h"
#include "opbridge/toolkit/rows.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace toolkit {
namespace rows {

namespace hn = hwy::HWY_NAMESPACE;

// The host-side types (opbridge/toolkit/rows.h), under the per-target name too.
using ::opbridge::toolkit::kMaxColumnSums;
using ::opbridge::toolkit::kMaxRowTensors;
using ::opbridge::toolkit::RowRange;
using ::opbridge::toolkit::RowTensors;

// Compute lanes of storage type T.
template <typename T>
using Tag = hn::ScalableTag<ComputeType<T>>;

// Elements summed in float lanes before a row sum moves to double.
constexpr int64_t kSumBlock = simd::kSumBlock;
// Rows whose per-column terms are summed in compute lanes before they move to
// the range's double partials: few enough that a float32 sum stays exact to
// a few ulps, enough that the double conversion is off the per-element path.
constexpr int64_t kColumnFlushRows = 8;

// Where the target has no float16 conversion instructions (x86 below AVX2,
// the emulated targets), Highway's float16 DemoteTo truncates; float16
// stores there round through opbridge's scalar conversion instead, so every
// target writes the same, correctly rounded values.
#if (HWY_ARCH_X86 && (HWY_TARGET >= HWY_SSE4 || defined(HWY_DISABLE_F16C))) || HWY_TARGET == HWY_EMU128 || \
    HWY_TARGET == HWY_SCALAR
constexpr bool kSoftFloat16 = true;
#else
constexpr bool kSoftFloat16 = false;
#endif

// A vector of d's lanes, all `value` (rounded to the lane type).
template <class D>
HWY_INLINE hn::VFromD<D> Set(D d, double value) {
  return hn::Set(d, static_cast<hn::TFromD<D>>(value));
}

// ---------------------------------------------------------------------------
// What a body returns.

namespace internal {
constexpr uint64_t AllBits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
constexpr size_t BitCount(uint64_t bits) { return bits == 0 ? 0 : (bits & 1) + BitCount(bits >> 1); }
}  // namespace internal

// Sum k adds sum_a[k] where bit k of kSumProducts is clear, and
// sum_a[k] * sum_b[i] where it is set, i counting the set bits below k (the
// products' second factors, in order); likewise for the per-column sums.
template <class V, size_t kWrites, size_t kSums, size_t kColumns, uint64_t kSumProducts = 0,
          uint64_t kColumnProducts = 0, size_t kMaxes = 0>
struct Step {
  static_assert(kSums <= 64 && kColumns <= 64, "at most 64 sums of each kind");
  std::array<V, kWrites> writes;
  std::array<V, kSums> sum_a;
  std::array<V, internal::BitCount(kSumProducts)> sum_b;
  std::array<V, kColumns> column_a;
  std::array<V, internal::BitCount(kColumnProducts)> column_b;
  std::array<V, kMaxes> maxes;
};

namespace internal {

template <size_t kPairs, class V>
HWY_INLINE void SplitPairs(std::array<V, kPairs>&, std::array<V, kPairs>&, size_t) {}
template <size_t kPairs, class V, class... Vs>
HWY_INLINE void SplitPairs(std::array<V, kPairs>& a, std::array<V, kPairs>& b, size_t k, V x, V y,
                           Vs... rest) {
  a[k] = x;
  b[k] = y;
  SplitPairs<kPairs>(a, b, k + 1, rest...);
}
}  // namespace internal

template <class V, class... Vs>
HWY_INLINE Step<V, 1 + sizeof...(Vs), 0, 0> Writes(V v, Vs... vs) {
  Step<V, 1 + sizeof...(Vs), 0, 0> step;
  step.writes = {v, vs...};
  return step;
}

template <class V, class... Vs>
HWY_INLINE Step<V, 0, 1 + sizeof...(Vs), 0> Sums(V v, Vs... vs) {
  Step<V, 0, 1 + sizeof...(Vs), 0> step;
  step.sum_a = {v, vs...};
  return step;
}

// SumProducts(a0, b0, a1, b1, ...): row sum k += a_k * b_k (one fused
// multiply-add per vector).
template <class V, class... Vs>
HWY_INLINE auto SumProducts(V a, V b, Vs... rest) {
  static_assert(sizeof...(Vs) % 2 == 0, "SumProducts takes pairs of vectors");
  constexpr size_t kPairs = (2 + sizeof...(Vs)) / 2;
  Step<V, 0, kPairs, 0, internal::AllBits(kPairs), 0> step;
  internal::SplitPairs<kPairs>(step.sum_a, step.sum_b, 0, a, b, rest...);
  return step;
}

// Maxes(v0, ...): the row's maximum k is taken over v_k (lanes of the
// padding past the row's end take no part).
template <class V, class... Vs>
HWY_INLINE Step<V, 0, 0, 0, 0, 0, 1 + sizeof...(Vs)> Maxes(V v, Vs... vs) {
  Step<V, 0, 0, 0, 0, 0, 1 + sizeof...(Vs)> step;
  step.maxes = {v, vs...};
  return step;
}

template <class V, class... Vs>
HWY_INLINE Step<V, 0, 0, 1 + sizeof...(Vs)> Columns(V v, Vs... vs) {
  Step<V, 0, 0, 1 + sizeof...(Vs)> step;
  step.column_a = {v, vs...};
  return step;
}

template <class V, class... Vs>
HWY_INLINE auto ColumnProducts(V a, V b, Vs... rest) {
  static_assert(sizeof...(Vs) % 2 == 0, "ColumnProducts takes pairs of vectors");
  constexpr size_t kPairs = (2 + sizeof...(Vs)) / 2;
  Step<V, 0, 0, kPairs, 0, internal::AllBits(kPairs)> step;
  internal::SplitPairs<kPairs>(step.column_a, step.column_b, 0, a, b, rest...);
  return step;
}

namespace internal {
// out = a then b.
template <class V, size_t kA, size_t kB>
HWY_INLINE void ConcatInto(std::array<V, kA + kB>& out, const std::array<V, kA>& a,
                           const std::array<V, kB>& b) {
  for (size_t k = 0; k < kA; ++k) out[k] = a[k];
  for (size_t k = 0; k < kB; ++k) out[kA + k] = b[k];
}
}  // namespace internal

// Both steps' parts, in order (a's outputs, sums and maxima first).
template <class V, size_t kW1, size_t kS1, size_t kC1, uint64_t kSP1, uint64_t kCP1, size_t kM1, size_t kW2,
          size_t kS2, size_t kC2, uint64_t kSP2, uint64_t kCP2, size_t kM2>
HWY_INLINE auto operator+(const Step<V, kW1, kS1, kC1, kSP1, kCP1, kM1>& a,
                          const Step<V, kW2, kS2, kC2, kSP2, kCP2, kM2>& b) {
  constexpr uint64_t kSP = kSP1 | (kS1 >= 64 ? 0 : kSP2 << kS1);
  constexpr uint64_t kCP = kCP1 | (kC1 >= 64 ? 0 : kCP2 << kC1);
  Step<V, kW1 + kW2, kS1 + kS2, kC1 + kC2, kSP, kCP, kM1 + kM2> step;
  internal::ConcatInto(step.writes, a.writes, b.writes);
  internal::ConcatInto(step.sum_a, a.sum_a, b.sum_a);
  internal::ConcatInto(step.sum_b, a.sum_b, b.sum_b);
  internal::ConcatInto(step.column_a, a.column_a, b.column_a);
  internal::ConcatInto(step.column_b, a.column_b, b.column_b);
  internal::ConcatInto(step.maxes, a.maxes, b.maxes);
  return step;
}

template <typename S>
struct StepTraits;
template <class V, size_t kW, size_t kS, size_t kC, uint64_t kSP, uint64_t kCP, size_t kM>
struct StepTraits<Step<V, kW, kS, kC, kSP, kCP, kM>> {
  static constexpr size_t kWrites = kW, kSums = kS, kColumns = kC, kMaxes = kM;
  static constexpr uint64_t kSumProducts = kSP, kColumnProducts = kCP;
};

namespace internal {
// Term k of a step's sums (kProducts: which are products).
template <uint64_t kProducts, class V, size_t N, size_t M>
HWY_INLINE V Term(const std::array<V, N>& a, const std::array<V, M>& b, size_t k) {
  if constexpr (M == 0) {
    static_cast<void>(b);
    return a[k];
  } else {
    if (((kProducts >> k) & 1) == 0) return a[k];
    return hn::Mul(a[k], b[BitCount(kProducts & AllBits(k))]);
  }
}
// acc + term k, fused where the term is a product.
template <uint64_t kProducts, class V, size_t N, size_t M>
HWY_INLINE V AddTerm(const std::array<V, N>& a, const std::array<V, M>& b, size_t k, V acc) {
  if constexpr (M == 0) {
    static_cast<void>(b);
    return hn::Add(a[k], acc);
  } else {
    if (((kProducts >> k) & 1) == 0) return hn::Add(a[k], acc);
    return hn::MulAdd(a[k], b[BitCount(kProducts & AllBits(k))], acc);
  }
}
}  // namespace internal

// ---------------------------------------------------------------------------
// Loads and stores of storage type T in compute lanes. Calls to them are
// qualified (rows::Load): unqualified, argument-dependent lookup on the
// descriptor would prefer Highway's aligned hn::Load and hn::Store.

// d's lanes from T (float16 and bfloat16 widen; for double lanes, float too).
template <class D, typename T>
HWY_INLINE hn::VFromD<D> Load(D d, const T* p) {
  using L = hn::TFromD<D>;
  if constexpr (std::is_same_v<L, double> && !std::is_same_v<T, double>) {
    const hn::Rebind<float, D> df;
    return hn::PromoteTo(d, simd::ReadLanes(df, p));
  } else {
    return simd::ReadLanes(d, p);
  }
}

// The first `count` elements from p, the rest of the vector zero.
template <class D, typename T>
HWY_INLINE hn::VFromD<D> LoadTail(D d, const T* p, int64_t count) {
  alignas(64) T buffer[simd::kMaxLanes] = {};
  std::memcpy(static_cast<void*>(buffer), p, static_cast<size_t>(count) * sizeof(T));
  return rows::Load(d, buffer);
}

// Stores v rounded to T (nearest even on every target).
template <class D, typename T>
HWY_INLINE void Store(D d, hn::VFromD<D> v, T* p) {
  if constexpr (kSoftFloat16 && std::is_same_v<T, Float16>) {
    alignas(64) float lanes[simd::kMaxLanes];
    hn::StoreU(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = ToFloat16(lanes[i]);
  } else {
    simd::WriteLanes(d, v, p);
  }
}

// A non-temporal store where T is the lane type and p is vector-aligned.
template <class D, typename T>
HWY_INLINE void StoreStream(D d, hn::VFromD<D> v, T* p) {
  if constexpr (std::is_same_v<T, hn::TFromD<D>>) {
    hn::Stream(v, d, p);
  } else {
    rows::Store(d, v, p);
  }
}

// The first `count` lanes of v to p.
template <class D, typename T>
HWY_INLINE void StoreTail(D d, hn::VFromD<D> v, T* p, int64_t count) {
  alignas(64) T buffer[simd::kMaxLanes];
  rows::Store(d, v, buffer);
  std::memcpy(static_cast<void*>(p), buffer, static_cast<size_t>(count) * sizeof(T));
}

// v as storage type T would hold it: rounded to T and widened again (the
// identity for float and double storage), as Store rounds.
template <typename T, class D>
HWY_INLINE hn::VFromD<D> Round(D d, hn::VFromD<D> v) {
  using L = hn::TFromD<D>;
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, L>) {
    return v;
  } else if constexpr (std::is_same_v<L, double>) {
    const hn::Rebind<float, D> df;
    return hn::PromoteTo(d, rows::Round<T>(df, hn::DemoteTo(df, v)));
  } else if constexpr (kSoftFloat16 && std::is_same_v<T, Float16>) {
    alignas(64) float lanes[simd::kMaxLanes];
    hn::StoreU(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = ToFloat(ToFloat16(lanes[i]));
    return hn::LoadU(d, lanes);
  } else {
    return simd::RoundTrip<T>(d, v);
  }
}

// ---------------------------------------------------------------------------
// One pass over a row's columns.

// Where a pass's writes and per-column terms go, and what it prefetches.
template <typename T>
struct Pass {
  int64_t cols = 0;
  bool stream = false;  // non-temporal stores (where every output is vector-aligned)
  int writes = 0;
  T* out[kMaxRowTensors] = {};
  int prefetches = 0;
  const T* prefetch[2] = {};
  // Per-column sums of the compute type, with simd::kMaxLanes elements of
  // padding past cols; null entries are skipped (ForEachRowWithColumnSums).
  ComputeType<T>* const* columns = nullptr;

  // The body's Writes(v_0, ...) go to p_0, ... in this order.
  Pass& Write(T* p) {
    out[writes++] = p;
    return *this;
  }
  // p[j] is fetched into the cache while columns j are processed (at most 2:
  // the next row's inputs). Only passes that write prefetch.
  Pass& Prefetch(const T* p) {
    if (prefetches < 2) prefetch[prefetches++] = p;
    return *this;
  }
  Pass& ColumnSums(ComputeType<T>* const* sums) {
    columns = sums;
    return *this;
  }
  Pass& Stream(bool on) {
    stream = on;
    return *this;
  }
};

// A pass over a row of t's shape, streaming where t does.
template <typename T>
Pass<T> PassOf(const RowTensors<T>& t) {
  Pass<T> pass;
  pass.cols = t.cols;
  pass.stream = t.stream;
  return pass;
}

namespace internal {

template <class D, class S>
HWY_INLINE void AddSums(const S& s, std::array<hn::VFromD<D>, StepTraits<S>::kSums>& acc) {
  for (size_t k = 0; k < StepTraits<S>::kSums; ++k) {
    acc[k] = AddTerm<StepTraits<S>::kSumProducts>(s.sum_a, s.sum_b, k, acc[k]);
  }
}

template <class D, class S>
HWY_INLINE void AddMaxes(const S& s, std::array<hn::VFromD<D>, StepTraits<S>::kMaxes>& acc) {
  for (size_t k = 0; k < StepTraits<S>::kMaxes; ++k) acc[k] = hn::Max(acc[k], s.maxes[k]);
}

// The full vectors of a pass: the row sums added into totals[k] (flushed to
// double every kSumBlock elements), the maxima into max_acc[k] (lanes).
template <bool kStream, int kPrefetch, typename T, class D, class Body, class MaxAcc, class... In>
HWY_INLINE void FullVectors(D d, const Pass<T>& pass, const Body& body, int64_t full, double* totals,
                            MaxAcc& max_acc, const In*... in) {
  using S = decltype(body(d, rows::Load(d, in)...));
  using Traits = StepTraits<S>;
  constexpr size_t kSums = Traits::kSums;
  constexpr size_t kMaxes = Traits::kMaxes;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  std::array<hn::VFromD<D>, kSums> acc0, acc1;
  std::array<hn::VFromD<D>, kMaxes> max1 = max_acc;
  auto step = [&](int64_t j, std::array<hn::VFromD<D>, kSums>& acc, std::array<hn::VFromD<D>, kMaxes>& mx) {
    if constexpr (kPrefetch > 0) hwy::Prefetch(pass.prefetch[0] + j);
    if constexpr (kPrefetch > 1) hwy::Prefetch(pass.prefetch[1] + j);
    const S s = body(d, rows::Load(d, in + j)...);
    for (size_t k = 0; k < Traits::kWrites; ++k) {
      if constexpr (kStream) {
        rows::StoreStream(d, s.writes[k], pass.out[k] + j);
      } else {
        rows::Store(d, s.writes[k], pass.out[k] + j);
      }
    }
    AddSums<D>(s, acc);
    AddMaxes<D>(s, mx);
    for (size_t k = 0; k < Traits::kColumns; ++k) {
      ComputeType<T>* column = pass.columns[k];
      if (column != nullptr) {
        hn::StoreU(AddTerm<Traits::kColumnProducts>(s.column_a, s.column_b, k, hn::LoadU(d, column + j)), d,
                   column + j);
      }
    }
  };
  int64_t j = 0;
  if constexpr (kSums > 0 || kMaxes > 0) {
    while (j < full) {
      const int64_t block_end = std::min(full, j + kSumBlock);
      for (size_t k = 0; k < kSums; ++k) acc0[k] = acc1[k] = hn::Zero(d);
      for (; j + 2 * lanes <= block_end; j += 2 * lanes) {
        step(j, acc0, max_acc);
        step(j + lanes, acc1, max1);
      }
      for (; j < block_end; j += lanes) step(j, acc0, max_acc);
      for (size_t k = 0; k < kSums; ++k) {
        totals[k] += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0[k], acc1[k]))));
      }
    }
    for (size_t k = 0; k < kMaxes; ++k) max_acc[k] = hn::Max(max_acc[k], max1[k]);
  } else {
    for (; j < full; j += lanes) step(j, acc0, max_acc);
  }
}

// The row sums again, in double lanes, element for element as the body
// computes them: for a row whose float sums overflowed.
template <size_t kSums, typename T, class Body, class... In>
HWY_NOINLINE std::array<double, kSums> SumsInDouble(const Pass<T>& pass, const Body& body, const In*... in) {
  const hn::ScalableTag<double> dd;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const int64_t cols = pass.cols;
  std::array<hn::VFromD<decltype(dd)>, kSums> acc;
  for (size_t k = 0; k < kSums; ++k) acc[k] = hn::Zero(dd);
  int64_t j = 0;
  for (; j + lanes <= cols; j += lanes) AddSums<decltype(dd)>(body(dd, rows::Load(dd, in + j)...), acc);
  if (j < cols) {
    const int64_t rest = cols - j;
    const auto s = body(dd, rows::LoadTail(dd, in + j, rest)...);
    using S = std::decay_t<decltype(s)>;
    const auto mask = hn::FirstN(dd, static_cast<size_t>(rest));
    for (size_t k = 0; k < kSums; ++k) {
      acc[k] =
          hn::Add(acc[k], hn::IfThenElseZero(mask, Term<StepTraits<S>::kSumProducts>(s.sum_a, s.sum_b, k)));
    }
  }
  std::array<double, kSums> totals;
  for (size_t k = 0; k < kSums; ++k) totals[k] = hn::GetLane(hn::SumOfLanes(dd, acc[k]));
  return totals;
}

}  // namespace internal

// Runs body over one row's columns [0, pass.cols): body(d, in_0[j..], ...)
// for each vector of columns (the last one zero-padded), with every input
// pointer at this row's (or, for a column vector, the tensor's) first
// element, all of storage type T. Returns, in double, the row sums of the
// body's Sums and SumProducts, then the row maxima of its Maxes (-inf for an
// empty row; a NaN among a maximum's terms may or may not be kept, by target:
// a kernel that must propagate NaN lets it reach a sum too).
template <typename T, class Body, class... In>
HWY_INLINE auto ForColumns(const Pass<T>& pass, const Body& body, const In*... in) {
  static_assert((std::is_same_v<In, T> && ...), "a pass's inputs are of the pass's storage type");
  using C = ComputeType<T>;
  const Tag<T> d;
  using S = decltype(body(d, rows::Load(d, in)...));
  using Traits = StepTraits<S>;
  constexpr size_t kSums = Traits::kSums;
  constexpr size_t kMaxes = Traits::kMaxes;
  std::array<double, kSums + kMaxes> totals{};
  std::array<hn::VFromD<decltype(d)>, kMaxes> max_acc;
  const auto lowest = hn::Set(d, -std::numeric_limits<C>::infinity());
  for (size_t k = 0; k < kMaxes; ++k) max_acc[k] = lowest;
  const int64_t cols = pass.cols;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  bool aligned = pass.stream;
  for (size_t k = 0; k < Traits::kWrites && aligned; ++k) aligned = simd::AlignedFor(d, pass.out[k]);
  if constexpr (Traits::kWrites == 0) {
    // A reduction: no stores to stream, nothing fetched ahead (its row is
    // the one the following passes read from cache).
    internal::FullVectors<false, 0>(d, pass, body, full, totals.data(), max_acc, in...);
  } else {
    auto run = [&](auto stream_tag) {
      constexpr bool kStream = decltype(stream_tag)::value;
      if (pass.prefetches >= 2) {
        internal::FullVectors<kStream, 2>(d, pass, body, full, totals.data(), max_acc, in...);
      } else if (pass.prefetches == 1) {
        internal::FullVectors<kStream, 1>(d, pass, body, full, totals.data(), max_acc, in...);
      } else {
        internal::FullVectors<kStream, 0>(d, pass, body, full, totals.data(), max_acc, in...);
      }
    };
    if (aligned) {
      run(std::true_type());
    } else {
      run(std::false_type());
    }
  }
  if (full < cols) {
    const int64_t rest = cols - full;
    const S s = body(d, rows::LoadTail(d, in + full, rest)...);
    for (size_t k = 0; k < Traits::kWrites; ++k) rows::StoreTail(d, s.writes[k], pass.out[k] + full, rest);
    const auto mask = hn::FirstN(d, static_cast<size_t>(rest));
    for (size_t k = 0; k < kSums; ++k) {
      const auto term = hn::IfThenElseZero(mask, internal::Term<Traits::kSumProducts>(s.sum_a, s.sum_b, k));
      totals[k] += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, term)));
    }
    for (size_t k = 0; k < kMaxes; ++k) {
      max_acc[k] = hn::Max(max_acc[k], hn::IfThenElse(mask, s.maxes[k], lowest));
    }
    for (size_t k = 0; k < Traits::kColumns; ++k) {
      C* column = pass.columns[k];
      if (column != nullptr) {
        // The padding past cols takes the masked (zero) terms.
        const auto term =
            hn::IfThenElseZero(mask, internal::Term<Traits::kColumnProducts>(s.column_a, s.column_b, k));
        hn::StoreU(hn::Add(hn::LoadU(d, column + full), term), d, column + full);
      }
    }
  }
  if constexpr (kSums > 0 && !std::is_same_v<C, double>) {
    bool finite = true;
    for (size_t k = 0; k < kSums; ++k) finite = finite && std::isfinite(totals[k]);
    if (!finite) {
      const std::array<double, kSums> sums = internal::SumsInDouble<kSums>(pass, body, in...);
      for (size_t k = 0; k < kSums; ++k) totals[k] = sums[k];
    }
  }
  for (size_t k = 0; k < kMaxes; ++k) {
    totals[kSums + k] = static_cast<double>(hn::GetLane(hn::MaxOfLanes(d, max_acc[k])));
  }
  return totals;
}

// The online form of a softmax's row statistics: for z = body(d, in...)
// over the row's columns, {m, s} with m = max(z) and s = sum(exp(z - m)), in
// one pass (each lane keeps its own maximum and rescales its sum when that
// grows; the lanes are joined at the end), so a row is read once even where
// it does not fit in the cache. An empty row (or one of -inf only) gives
// {-inf, 0}; a NaN in z gives a NaN s. log(s) + m is the row's logsumexp.
template <typename T, class Body, class... In>
HWY_INLINE std::array<double, 2> MaxAndSumExp(const Pass<T>& pass, const Body& body, const In*... in) {
  static_assert((std::is_same_v<In, T> && ...), "a pass's inputs are of the pass's storage type");
  using C = ComputeType<T>;
  const Tag<T> d;
  using V = hn::VFromD<decltype(d)>;
  const V lowest = hn::Set(d, -std::numeric_limits<C>::infinity());
  const int64_t cols = pass.cols;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V m = lowest;
  V sum = hn::Zero(d);
  auto add = [&](V z) {
    const V grown = hn::Max(m, z);
    // A lane whose maximum grew rescales its sum (exp(m - grown) < 1); a lane
    // still at -inf has nothing to rescale (and -inf - -inf is NaN).
    const auto changed = hn::And(hn::Lt(m, grown), hn::Gt(m, lowest));
    if (!hn::AllFalse(d, changed)) {
      sum = hn::IfThenElse(changed, hn::Mul(sum, toolkit::Exp(d, hn::Sub(m, grown))), sum);
    }
    m = grown;
    const V term = toolkit::Exp(d, hn::Sub(z, m));
    // exp(z - m) where m is -inf: z is -inf too, and the term is 0.
    sum = hn::Add(sum, hn::IfThenElseZero(hn::Gt(m, lowest), term));
    // A NaN z: its lane's sum becomes NaN whatever Max made of it.
    sum = hn::IfThenElse(hn::Eq(z, z), sum, z);
  };
  int64_t j = 0;
  for (; j + lanes <= cols; j += lanes) add(body(d, rows::Load(d, in + j)...));
  if (j < cols) {
    const int64_t rest = cols - j;
    const auto mask = hn::FirstN(d, static_cast<size_t>(rest));
    add(hn::IfThenElse(mask, body(d, rows::LoadTail(d, in + j, rest)...), lowest));
  }
  alignas(64) C lane_max[simd::kMaxLanes];
  alignas(64) C lane_sum[simd::kMaxLanes];
  hn::Store(m, d, lane_max);
  hn::Store(sum, d, lane_sum);
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < lanes; ++k) row_max = std::max(row_max, static_cast<double>(lane_max[k]));
  double total = 0.0;
  for (int64_t k = 0; k < lanes; ++k) {
    const double s = static_cast<double>(lane_sum[k]);
    if (std::isnan(s)) return {row_max, s};
    if (lane_max[k] > -std::numeric_limits<C>::infinity()) total += s * std::exp(lane_max[k] - row_max);
  }
  return {row_max, total};
}

// ---------------------------------------------------------------------------
// Rows.

// One row of a RowTensors problem.
template <typename T>
struct Row {
  int64_t index = 0;
  const T* in[kMaxRowTensors] = {};          // this row of each input (null where the slot is)
  const T* next[kMaxRowTensors] = {};        // the next row of the range (this row for the last), to prefetch
  T* out[kMaxRowTensors] = {};               // this row of each output
  const T* per_row_in[kMaxRowTensors] = {};  // this row's value of each per-row input
  T* per_row_out[kMaxRowTensors] = {};       // this row's value of each per-row output
};

namespace internal {
template <typename T>
HWY_INLINE Row<T> RowOf(const RowTensors<T>& t, int64_t r, int64_t last) {
  Row<T> row;
  row.index = r;
  const int64_t offset = r * t.cols;
  const int64_t next = (r < last ? r + 1 : r) * t.cols;
  for (int k = 0; k < kMaxRowTensors; ++k) {
    if (t.in[k] != nullptr) {
      row.in[k] = t.in[k] + offset;
      row.next[k] = t.in[k] + next;
    }
    if (t.out[k] != nullptr) row.out[k] = t.out[k] + offset;
    if (t.per_row_in[k] != nullptr) row.per_row_in[k] = t.per_row_in[k] + r;
    if (t.per_row_out[k] != nullptr) row.per_row_out[k] = t.per_row_out[k] + r;
  }
  return row;
}
}  // namespace internal

// body(Row<T>) for each row of the range, in order; then the non-temporal
// stores are flushed (when t.stream).
template <typename T, class Body>
HWY_INLINE void ForEachRow(const RowTensors<T>& t, const RowRange& range, const Body& body) {
  for (int64_t r = range.begin; r < range.end; ++r) body(internal::RowOf(t, r, range.end - 1));
  if (t.stream) hwy::FlushStream();
}

// As ForEachRow, with per-column sums: body(Row<T>, ComputeType<T>* const*
// columns), where columns[k] (null where range.column_sums[k] is) holds
// cols compute-type sums (and padding), to pass to Pass::ColumnSums. They
// are added into range.column_sums[k] in double every kColumnFlushRows rows
// and at the end of the range.
template <typename T, class Body>
HWY_INLINE void ForEachRowWithColumnSums(const RowTensors<T>& t, const RowRange& range, const Body& body) {
  using C = ComputeType<T>;
  const int64_t cols = t.cols;
  const int64_t stride = cols + simd::kMaxLanes;
  int wanted = 0;
  for (int k = 0; k < kMaxColumnSums; ++k) wanted += range.column_sums[k] != nullptr ? 1 : 0;
  std::vector<C> storage(static_cast<size_t>(wanted * stride), C(0));
  C* columns[kMaxColumnSums] = {};
  for (int k = 0, slot = 0; k < kMaxColumnSums; ++k) {
    if (range.column_sums[k] != nullptr) columns[k] = storage.data() + (slot++) * stride;
  }
  auto flush = [&]() {
    for (int k = 0; k < kMaxColumnSums; ++k) {
      if (columns[k] == nullptr) continue;
      double* partial = range.column_sums[k];
      for (int64_t j = 0; j < cols; ++j) {
        partial[j] += static_cast<double>(columns[k][j]);
        columns[k][j] = C(0);
      }
    }
  };
  for (int64_t r = range.begin; r < range.end; ++r) {
    body(internal::RowOf(t, r, range.end - 1), static_cast<C* const*>(columns));
    if ((r - range.begin + 1) % kColumnFlushRows == 0 || r + 1 == range.end) flush();
  }
  if (t.stream) hwy::FlushStream();
}

}  // namespace rows
}  // namespace toolkit
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)

// Per target, inside namespace HWY_NAMESPACE (of the namespace that the
// HWY_ONCE section's OPBRIDGE_ROWS_EXPORT(NAME) is in): defines NAME##F32,
// NAME##F64, NAME##F16 and NAME##BF16, each
//   void(const RowTensors<T>&, const RowRange&)
// calling FUNCTION<T>, a template of that signature.
#ifndef OPBRIDGE_ROWS_ENTRY_POINTS
#define OPBRIDGE_ROWS_ENTRY_POINTS(NAME, FUNCTION)                                                           \
  void NAME##F32(const ::opbridge::toolkit::RowTensors<float>& t, const ::opbridge::toolkit::RowRange& r) {  \
    FUNCTION<float>(t, r);                                                                                   \
  }                                                                                                          \
  void NAME##F64(const ::opbridge::toolkit::RowTensors<double>& t, const ::opbridge::toolkit::RowRange& r) { \
    FUNCTION<double>(t, r);                                                                                  \
  }                                                                                                          \
  void NAME##F16(const ::opbridge::toolkit::RowTensors<::opbridge::Float16>& t,                              \
                 const ::opbridge::toolkit::RowRange& r) {                                                   \
    FUNCTION<::opbridge::Float16>(t, r);                                                                     \
  }                                                                                                          \
  void NAME##BF16(const ::opbridge::toolkit::RowTensors<::opbridge::BFloat16>& t,                            \
                  const ::opbridge::toolkit::RowRange& r) {                                                  \
    FUNCTION<::opbridge::BFloat16>(t, r);                                                                    \
  }                                                                                                          \
  static_assert(true, "")
#endif
