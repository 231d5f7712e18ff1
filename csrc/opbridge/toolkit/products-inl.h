// Small products for kernels, per SIMD target: dot products of short rows
// held in cache, and sums of scaled rows, as feature interactions
// (pairwise dot products of F vectors of D), attention over a few keys and
// other small batched matrix products need. Rows are contiguous, of storage
// type T (float, double, Float16, BFloat16: 16-bit rows are widened to
// float32 lanes in the registers).
//
//   RowDots(a, b, rows, cols, out)
//       out[j] = sum_k a[k] * b[j * cols + k] for j < rows: one row against
//       several, four at a time (each load of a feeds four products).
//   AddScaledRows(w, x, rows, cols, out)
//       out[k] += sum_j w[j] * x[j * cols + k] for k < cols: a row of a small
//       matrix product, and the backward of RowDots.
//
// Accuracy: the products accumulate in compute lanes (float32 for float32
// and the 16-bit types, float64 for float64), several partial sums per
// lane, added at the end; the error is that of a float32 (float64) sum,
// within cols * eps * sum_k |a[k] b[k]| (eps 2^-24, 2^-53), as
// toolkit_products_test.cpp checks against double on every SIMD target for
// rows of up to 1000 values. For much longer rows, sum blocks yourself.
#if defined(OPBRIDGE_TOOLKIT_PRODUCTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPBRIDGE_TOOLKIT_PRODUCTS_INL_H_
#undef OPBRIDGE_TOOLKIT_PRODUCTS_INL_H_
#else
#define OPBRIDGE_TOOLKIT_PRODUCTS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "opbridge/half.h"
#include "opbridge/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace toolkit {

namespace hn = hwy::HWY_NAMESPACE;

namespace products_internal {

// Lanes k0 .. k0 + Lanes(d) of row p, zero past `cols`.
template <class D, typename T>
HWY_INLINE hn::VFromD<D> Load(D d, const T* p, int64_t k0, int64_t cols, T* buffer) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  return k0 + n <= cols ? simd::ReadLanes(d, p + k0) : simd::ReadTail(d, p + k0, cols - k0, buffer);
}

}  // namespace products_internal

// out[j] = dot(a, row j of b), j < rows; each row of cols values of T.
template <typename T, typename Out>
HWY_INLINE void RowDots(const T* a, const T* b, int64_t rows, int64_t cols, Out* out) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  T buffer[simd::kMaxLanes];
  using products_internal::Load;
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) {
    const T* b0 = b + j * cols;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    for (int64_t k = 0; k < cols; k += n) {
      const auto va = Load(d, a, k, cols, buffer);
      s0 = hn::MulAdd(va, Load(d, b0, k, cols, buffer), s0);
      s1 = hn::MulAdd(va, Load(d, b0 + cols, k, cols, buffer), s1);
      s2 = hn::MulAdd(va, Load(d, b0 + 2 * cols, k, cols, buffer), s2);
      s3 = hn::MulAdd(va, Load(d, b0 + 3 * cols, k, cols, buffer), s3);
    }
    out[j] = static_cast<Out>(hn::GetLane(hn::SumOfLanes(d, s0)));
    out[j + 1] = static_cast<Out>(hn::GetLane(hn::SumOfLanes(d, s1)));
    out[j + 2] = static_cast<Out>(hn::GetLane(hn::SumOfLanes(d, s2)));
    out[j + 3] = static_cast<Out>(hn::GetLane(hn::SumOfLanes(d, s3)));
  }
  for (; j < rows; ++j) {
    const T* bj = b + j * cols;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t k = 0;
    for (; k + 2 * n <= cols; k += 2 * n) {
      s0 = hn::MulAdd(simd::ReadLanes(d, a + k), simd::ReadLanes(d, bj + k), s0);
      s1 = hn::MulAdd(simd::ReadLanes(d, a + k + n), simd::ReadLanes(d, bj + k + n), s1);
    }
    for (; k < cols; k += n) s0 = hn::MulAdd(Load(d, a, k, cols, buffer), Load(d, bj, k, cols, buffer), s0);
    out[j] = static_cast<Out>(hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1))));
  }
}

// out[k] += sum_j w[j] * row j of x, k < cols; out in compute type (float
// for float32 and the 16-bit types, double for double): a caller adds
// several calls' terms before rounding once to T. Four vectors of columns
// at a time (four independent chains of multiply-adds).
template <typename T, typename W>
HWY_INLINE void AddScaledRows(const W* w, const T* x, int64_t rows, int64_t cols, ComputeType<T>* out) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  T buffer[simd::kMaxLanes];
  C tail[simd::kMaxLanes];
  int64_t k = 0;
  for (; k + 4 * n <= cols; k += 4 * n) {
    auto a0 = hn::LoadU(d, out + k), a1 = hn::LoadU(d, out + k + n);
    auto a2 = hn::LoadU(d, out + k + 2 * n), a3 = hn::LoadU(d, out + k + 3 * n);
    for (int64_t j = 0; j < rows; ++j) {
      const auto wj = hn::Set(d, static_cast<C>(w[j]));
      const T* xj = x + j * cols + k;
      a0 = hn::MulAdd(wj, simd::ReadLanes(d, xj), a0);
      a1 = hn::MulAdd(wj, simd::ReadLanes(d, xj + n), a1);
      a2 = hn::MulAdd(wj, simd::ReadLanes(d, xj + 2 * n), a2);
      a3 = hn::MulAdd(wj, simd::ReadLanes(d, xj + 3 * n), a3);
    }
    hn::StoreU(a0, d, out + k);
    hn::StoreU(a1, d, out + k + n);
    hn::StoreU(a2, d, out + k + 2 * n);
    hn::StoreU(a3, d, out + k + 3 * n);
  }
  for (; k < cols; k += n) {
    const bool partial = k + n > cols;
    const int64_t count = partial ? cols - k : n;
    auto acc = partial ? simd::ReadTail(d, out + k, count, tail) : hn::LoadU(d, out + k);
    for (int64_t j = 0; j < rows; ++j) {
      acc = hn::MulAdd(hn::Set(d, static_cast<C>(w[j])),
                       products_internal::Load(d, x + j * cols, k, cols, buffer), acc);
    }
    if (partial) {
      simd::WriteTail(d, acc, out + k, count, tail);
    } else {
      hn::StoreU(acc, d, out + k);
    }
  }
}

}  // namespace toolkit
}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#endif  // include guard (per target)
