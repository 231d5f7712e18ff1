// layer_norm kernels, vectorized with Highway: compiled once per SIMD target
// (foreach_target re-includes this file) and dispatched at run time to the
// best target the CPU supports. Each row is read from memory once: the first
// pass (the mean) brings it into cache, the variance pass and the writing
// pass re-read it from there.
//
// The variance is the second pass's sum of squared deviations from the
// first pass's mean, corrected by the deviations' own mean (which is the
// rounding error of the first mean): no cancellation however far the mean
// lies from zero. The normalized value subtracts that mean as two parts
// (the rounded mean, then the correction), so a row whose mean is large
// next to its spread keeps its precision.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/kernel.cpp"
#include "ops/layer_norm/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/layer_norm/spec.h"

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

template <typename T>
using ComputeOf = ComputeType<T>;

// Elements summed in compute lanes before a partial sum moves to double:
// keeps float32 accumulation error far below the float32 tolerances even for
// very long rows.
constexpr int64_t kBlock = 1024;

// Where the target has no float16 conversion instructions (x86 below AVX2,
// the emulated targets), Highway's float16 DemoteTo truncates; stores of
// float16 there round through opbridge's scalar conversion instead, so that
// every target writes the same, correctly rounded values (residual_out must
// equal the unfused add exactly).
#if (HWY_ARCH_X86 && (HWY_TARGET >= HWY_SSE4 || defined(HWY_DISABLE_F16C))) || HWY_TARGET == HWY_EMU128 || \
    HWY_TARGET == HWY_SCALAR
constexpr bool kSoftFloat16 = true;
#else
constexpr bool kSoftFloat16 = false;
#endif

template <class D, typename T>
HWY_INLINE void Store(D d, hn::VFromD<D> v, T* p) {
  if constexpr (kSoftFloat16 && std::is_same_v<T, Float16>) {
    alignas(64) float lanes[kMaxLanes];
    hn::StoreU(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = ToFloat16(lanes[i]);
  } else {
    WriteLanes(d, v, p);
  }
}

// A non-temporal store where T is the lane type (see WriteLanesStream).
template <class D, typename T>
HWY_INLINE void StoreStream(D d, hn::VFromD<D> v, T* p) {
  if constexpr (std::is_same_v<T, hn::TFromD<D>>) {
    WriteLanesStream(d, v, p);
  } else {
    Store(d, v, p);
  }
}

template <class D, typename T>
HWY_INLINE void StoreTail(D d, hn::VFromD<D> v, T* p, int64_t count, T* buffer) {
  Store(d, v, buffer);
  std::memcpy(static_cast<void*>(p), buffer, static_cast<size_t>(count) * sizeof(T));
}

template <class D>
double SumToDouble(D d, hn::VFromD<D> v) {
  return static_cast<double>(hn::GetLane(hn::SumOfLanes(d, v)));
}

// Pass 1 of a row: sum_j x_j. With kAdd, s_j = x_j + residual_j is rounded
// to T, written to sum, and summed instead (as stored, so the statistics
// are those of the tensor add_layer_norm returns).
template <typename T, bool kAdd>
double RowSum(const T* x, const T* residual, T* sum, int64_t cols) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  auto value = [&](int64_t j) {
    if constexpr (kAdd) {
      auto s = hn::Add(ReadLanes(d, x + j), ReadLanes(d, residual + j));
      Store(d, s, sum + j);
      if constexpr (!std::is_same_v<T, C>) s = ReadLanes(d, sum + j);
      return s;
    } else {
      return ReadLanes(d, x + j);
    }
  };
  double total = 0.0;
  int64_t j = 0;
  const int64_t full = cols - cols % lanes;
  while (j < full) {
    const int64_t block_end = std::min(full, j + kBlock);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    for (; j + 2 * lanes <= block_end; j += 2 * lanes) {
      s0 = hn::Add(s0, value(j));
      s1 = hn::Add(s1, value(j + lanes));
    }
    for (; j < block_end; j += lanes) s0 = hn::Add(s0, value(j));
    total += SumToDouble(d, hn::Add(s0, s1));
  }
  if (j < cols) {
    const int64_t rest = cols - j;
    auto v = ReadTail(d, x + j, rest, buffer);
    if constexpr (kAdd) {
      v = hn::Add(v, ReadTail(d, residual + j, rest, buffer));
      StoreTail(d, v, sum + j, rest, buffer);
      if constexpr (!std::is_same_v<T, C>) v = ReadTail(d, sum + j, rest, buffer);
    }
    total += SumToDouble(d, v);
  }
  return total;
}

// Sums over a row of the deviations c_j = x_j - shift: sum c, sum c^2 and,
// with kGrad, sum gw and sum gw * c where gw_j = g_j (* w_j).
struct CenteredSums {
  double c = 0.0, cc = 0.0, gw = 0.0, gwc = 0.0;
};

template <typename T, bool kGrad, bool kWeight>
CenteredSums RowCenteredSums(const T* x, const T* g, const T* w, ComputeOf<T> shift, int64_t cols) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  const auto shift_v = hn::Set(d, shift);
  CenteredSums sums;
  auto a_c = hn::Zero(d), a_cc = hn::Zero(d), a_gw = hn::Zero(d), a_gwc = hn::Zero(d);
  auto b_c = hn::Zero(d), b_cc = hn::Zero(d);
  auto step = [&](hn::VFromD<decltype(d)> c, int64_t j, auto& acc_c, auto& acc_cc, const T* gp, const T* wp) {
    acc_c = hn::Add(acc_c, c);
    acc_cc = hn::MulAdd(c, c, acc_cc);
    if constexpr (kGrad) {
      auto gw = ReadLanes(d, gp + j);
      if constexpr (kWeight) gw = hn::Mul(gw, ReadLanes(d, wp + j));
      a_gw = hn::Add(a_gw, gw);
      a_gwc = hn::MulAdd(gw, c, a_gwc);
    }
  };
  auto flush = [&]() {
    sums.c += SumToDouble(d, hn::Add(a_c, b_c));
    sums.cc += SumToDouble(d, hn::Add(a_cc, b_cc));
    a_c = b_c = a_cc = b_cc = hn::Zero(d);
    if constexpr (kGrad) {
      sums.gw += SumToDouble(d, a_gw);
      sums.gwc += SumToDouble(d, a_gwc);
      a_gw = a_gwc = hn::Zero(d);
    }
  };
  int64_t j = 0;
  const int64_t full = cols - cols % lanes;
  while (j < full) {
    const int64_t block_end = std::min(full, j + kBlock);
    if constexpr (!kGrad) {
      for (; j + 2 * lanes <= block_end; j += 2 * lanes) {
        step(hn::Sub(ReadLanes(d, x + j), shift_v), j, a_c, a_cc, g, w);
        step(hn::Sub(ReadLanes(d, x + j + lanes), shift_v), j + lanes, b_c, b_cc, g, w);
      }
    }
    for (; j < block_end; j += lanes) step(hn::Sub(ReadLanes(d, x + j), shift_v), j, a_c, a_cc, g, w);
    flush();
  }
  if (j < cols) {
    const int64_t rest = cols - j;
    // Padding lanes read as zero; their deviation must be zero too.
    const auto c = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(rest)),
                                      hn::Sub(ReadTail(d, x + j, rest, buffer), shift_v));
    if constexpr (kGrad) {
      alignas(64) T gbuf[kMaxLanes];
      alignas(64) T wbuf[kMaxLanes];
      ReadTail(d, g + j, rest, gbuf);
      if constexpr (kWeight) ReadTail(d, w + j, rest, wbuf);
      step(c, 0, a_c, a_cc, gbuf, wbuf);
    } else {
      step(c, 0, a_c, a_cc, g, w);
    }
    flush();
  }
  if constexpr (!std::is_same_v<C, double>) {
    // A float32 square overflows past |c| = 1.8e19, where the row's standard
    // deviation is still a float: such a row (rare; inf and NaN inputs come
    // here too and stay so) is summed again in double.
    if (!std::isfinite(sums.cc) || !std::isfinite(sums.gwc)) {
      sums = CenteredSums();
      for (int64_t k = 0; k < cols; ++k) {
        const double c = static_cast<double>(ToFloat(x[k]) - shift);
        sums.c += c;
        sums.cc += c * c;
        if constexpr (kGrad) {
          double gw = static_cast<double>(ToFloat(g[k]));
          if constexpr (kWeight) gw *= static_cast<double>(ToFloat(w[k]));
          sums.gw += gw;
          sums.gwc += gw * c;
        }
      }
    }
  }
  return sums;
}

// The row's statistics: mean = shift + delta, rstd = 1 / sqrt(var + eps).
template <typename C>
struct RowStats {
  C shift;
  double delta;
  double rstd;
};

template <typename T>
RowStats<ComputeOf<T>> StatsOf(double sum, const CenteredSums& centered, int64_t cols, double eps) {
  const double inv_cols = 1.0 / static_cast<double>(cols);
  RowStats<ComputeOf<T>> stats;
  stats.shift = static_cast<ComputeOf<T>>(sum * inv_cols);
  stats.delta = centered.c * inv_cols;
  const double var = std::max(0.0, centered.cc * inv_cols - stats.delta * stats.delta);
  stats.rstd = 1.0 / std::sqrt(var + eps);
  return stats;
}

// Pass 3 of the forward: y = (x - shift) * rstd - delta * rstd (* w) (+ b).
// The deviation x - shift is exact where x is near the mean, and delta (the
// first mean's rounding error, in double) is scaled before it is rounded to
// C: rounded as it is, a subnormal delta would carry an error of rstd times
// the subnormal spacing into every output (a few percent of float32 rows of
// subnormal inputs).
template <typename T, bool kWeight, bool kBias, bool kStream>
void NormalizeRow(const T* xr, const T* w, const T* b, T* yr, int64_t cols, const RowStats<ComputeOf<T>>& s,
                  const T* next) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  const auto shift_v = hn::Set(d, s.shift);
  const auto delta_rstd_v = hn::Set(d, static_cast<C>(s.delta * s.rstd));
  const auto rstd_v = hn::Set(d, static_cast<C>(s.rstd));
  // wv and bv are read only where the row has a weight (bias).
  auto normalize = [&](hn::VFromD<decltype(d)> xv, hn::VFromD<decltype(d)> wv, hn::VFromD<decltype(d)> bv) {
    const auto y = hn::Sub(hn::Mul(hn::Sub(xv, shift_v), rstd_v), delta_rstd_v);
    if constexpr (kWeight && kBias) return hn::MulAdd(y, wv, bv);
    if constexpr (kWeight && !kBias) return hn::Mul(y, wv);
    if constexpr (!kWeight && kBias) return hn::Add(y, bv);
    return y;
  };
  const auto unused = hn::Zero(d);
  int64_t j = 0;
  const int64_t full = cols - cols % lanes;
  for (; j < full; j += lanes) {
    // While this row is written from cache, the next row is fetched.
    hwy::Prefetch(next + j);
    const auto y = normalize(ReadLanes(d, xr + j), kWeight ? ReadLanes(d, w + j) : unused,
                             kBias ? ReadLanes(d, b + j) : unused);
    if constexpr (kStream) {
      StoreStream(d, y, yr + j);
    } else {
      Store(d, y, yr + j);
    }
  }
  if (j < cols) {
    const int64_t rest = cols - j;
    alignas(64) T tail[kMaxLanes];
    const auto xv = ReadTail(d, xr + j, rest, tail);
    const auto wv = kWeight ? ReadTail(d, w + j, rest, tail) : unused;
    const auto bv = kBias ? ReadTail(d, b + j, rest, tail) : unused;
    StoreTail(d, normalize(xv, wv, bv), yr + j, rest, buffer);
  }
}

template <typename T, bool kWeight, bool kBias>
void NormalizeRowAs(bool stream, const T* xr, const T* w, const T* b, T* yr, int64_t cols,
                    const RowStats<ComputeOf<T>>& s, const T* next) {
  if (stream) {
    NormalizeRow<T, kWeight, kBias, true>(xr, w, b, yr, cols, s, next);
  } else {
    NormalizeRow<T, kWeight, kBias, false>(xr, w, b, yr, cols, s, next);
  }
}

// Rows [row_begin, row_end) of the forward; residual non-null: of x + residual
// (written to sum).
template <typename T>
void ForwardRows(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                 int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t offset = r * cols;
    double total;
    const T* xr;
    if (residual != nullptr) {
      total = RowSum<T, true>(x + offset, residual + offset, sum + offset, cols);
      xr = sum + offset;
    } else {
      total = RowSum<T, false>(x + offset, nullptr, nullptr, cols);
      xr = x + offset;
    }
    const C shift = static_cast<C>(total / static_cast<double>(cols));
    const CenteredSums centered = RowCenteredSums<T, false, false>(xr, nullptr, nullptr, shift, cols);
    const RowStats<C> stats = StatsOf<T>(total, centered, cols, eps);
    T* yr = y + offset;
    const bool stream_row = stream && AlignedFor(d, yr);
    // The next row's input, fetched while this one is written (x; the add's
    // second input is fetched by its own pass).
    const T* next = x + (r + 1 < row_end ? offset + cols : offset);
    if (weight != nullptr && bias != nullptr) {
      NormalizeRowAs<T, true, true>(stream_row, xr, weight, bias, yr, cols, stats, next);
    } else if (weight != nullptr) {
      NormalizeRowAs<T, true, false>(stream_row, xr, weight, bias, yr, cols, stats, next);
    } else if (bias != nullptr) {
      NormalizeRowAs<T, false, true>(stream_row, xr, weight, bias, yr, cols, stats, next);
    } else {
      NormalizeRowAs<T, false, false>(stream_row, xr, weight, bias, yr, cols, stats, next);
    }
  }
  if (stream) hwy::FlushStream();
}

// Rows whose weight and bias gradient terms are summed in compute lanes
// before the sums move to the chunk's double partials: few enough that the
// float32 sum stays exact to a few ulps, enough that the double
// conversion is off the per-element path.
constexpr int64_t kFlushRows = 8;

// The last pass of a backward row, from cache:
//   dx = rstd * gw + cst - k * c (+ grad_add), c = x - shift;
//   fw += g * xhat, xhat = (c - delta) * rstd; fb += g.
template <typename T, bool kWeight, bool kAdd>
void GradRow(const T* gr, const T* xr, const T* w, const T* ga, T* dxr, ComputeOf<T>* fw, ComputeOf<T>* fb,
             int64_t cols, const RowStats<ComputeOf<T>>& s, double k, double cst, bool stream,
             const T* next_x, const T* next_g) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  alignas(64) C accbuf[kMaxLanes] = {};
  const auto shift_v = hn::Set(d, s.shift);
  const auto delta_v = hn::Set(d, static_cast<C>(s.delta));
  const auto rstd_v = hn::Set(d, static_cast<C>(s.rstd));
  const auto k_v = hn::Set(d, static_cast<C>(k));
  const auto cst_v = hn::Set(d, static_cast<C>(cst));
  auto step = [&](hn::VFromD<decltype(d)> g, hn::VFromD<decltype(d)> xv, hn::VFromD<decltype(d)> wv,
                  hn::VFromD<decltype(d)> add, int64_t j) {
    const auto c = hn::Sub(xv, shift_v);
    const auto gw = kWeight ? hn::Mul(g, wv) : g;
    auto dx = hn::MulAdd(rstd_v, gw, hn::NegMulAdd(k_v, c, cst_v));
    if constexpr (kAdd) dx = hn::Add(dx, add);
    if (j + lanes <= cols) {
      if (stream) {
        StoreStream(d, dx, dxr + j);
      } else {
        Store(d, dx, dxr + j);
      }
      if (fw != nullptr) {
        hn::StoreU(hn::MulAdd(g, hn::Mul(hn::Sub(c, delta_v), rstd_v), hn::LoadU(d, fw + j)), d, fw + j);
      }
      if (fb != nullptr) hn::StoreU(hn::Add(hn::LoadU(d, fb + j), g), d, fb + j);
    } else {
      const int64_t rest = cols - j;
      StoreTail(d, dx, dxr + j, rest, buffer);
      if (fw != nullptr) {
        hn::StoreU(hn::Mul(g, hn::Mul(hn::Sub(c, delta_v), rstd_v)), d, accbuf);
        for (int64_t i = 0; i < rest; ++i) fw[j + i] += accbuf[i];
      }
      if (fb != nullptr) {
        hn::StoreU(g, d, accbuf);
        for (int64_t i = 0; i < rest; ++i) fb[j + i] += accbuf[i];
      }
    }
  };
  const auto one = hn::Set(d, C(1));
  const auto zero = hn::Zero(d);
  int64_t j = 0;
  const int64_t full = cols - cols % lanes;
  for (; j < full; j += lanes) {
    // While this row is finished from cache, the next row is fetched.
    hwy::Prefetch(next_x + j);
    hwy::Prefetch(next_g + j);
    step(ReadLanes(d, gr + j), ReadLanes(d, xr + j), kWeight ? ReadLanes(d, w + j) : one,
         kAdd ? ReadLanes(d, ga + j) : zero, j);
  }
  if (j < cols) {
    const int64_t rest = cols - j;
    alignas(64) T tail[kMaxLanes];
    const auto g = ReadTail(d, gr + j, rest, buffer);
    const auto xv = ReadTail(d, xr + j, rest, tail);
    const auto wv = kWeight ? ReadTail(d, w + j, rest, tail) : one;
    const auto add = kAdd ? ReadTail(d, ga + j, rest, tail) : zero;
    step(g, xv, wv, add, j);
  }
}

// Rows [row_begin, row_end) of the backward: grad_x, and the rows' weight
// (and bias) gradient contributions added into the double partials pw (pb).
template <typename T>
void BackwardRows(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x, double* pw,
                  double* pb, int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const double inv_cols = 1.0 / static_cast<double>(cols);
  std::vector<C> fw_sums(pw != nullptr ? static_cast<size_t>(cols) : 0, C(0));
  std::vector<C> fb_sums(pb != nullptr ? static_cast<size_t>(cols) : 0, C(0));
  C* fw = pw != nullptr ? fw_sums.data() : nullptr;
  C* fb = pb != nullptr ? fb_sums.data() : nullptr;
  auto flush = [&](double* partial, C* sums) {
    if (partial == nullptr) return;
    for (int64_t j = 0; j < cols; ++j) {
      partial[j] += static_cast<double>(sums[j]);
      sums[j] = C(0);
    }
  };
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t offset = r * cols;
    const T* xr = x + offset;
    const T* gr = grad_y + offset;
    const T* ga = grad_add != nullptr ? grad_add + offset : nullptr;
    T* dxr = grad_x + offset;
    const double total = RowSum<T, false>(xr, nullptr, nullptr, cols);
    const C shift = static_cast<C>(total * inv_cols);
    const CenteredSums centered = weight != nullptr
                                      ? RowCenteredSums<T, true, true>(xr, gr, weight, shift, cols)
                                      : RowCenteredSums<T, true, false>(xr, gr, nullptr, shift, cols);
    const RowStats<C> stats = StatsOf<T>(total, centered, cols, eps);
    // dx = rstd * (gw - mean(gw)) - rstd^3 * mean(gw * (x - mean)) * (x - mean)
    const double mean_gw = centered.gw * inv_cols;
    const double mean_gwc = centered.gwc * inv_cols - stats.delta * mean_gw;
    const double k = stats.rstd * stats.rstd * stats.rstd * mean_gwc;
    const double cst = k * stats.delta - stats.rstd * mean_gw;
    const bool stream_row = stream && AlignedFor(d, dxr);
    const int64_t next = r + 1 < row_end ? offset + cols : offset;
    const T* next_x = x + next;
    const T* next_g = grad_y + next;
    if (weight != nullptr) {
      if (ga != nullptr) {
        GradRow<T, true, true>(gr, xr, weight, ga, dxr, fw, fb, cols, stats, k, cst, stream_row, next_x,
                               next_g);
      } else {
        GradRow<T, true, false>(gr, xr, weight, ga, dxr, fw, fb, cols, stats, k, cst, stream_row, next_x,
                                next_g);
      }
    } else if (ga != nullptr) {
      GradRow<T, false, true>(gr, xr, weight, ga, dxr, fw, fb, cols, stats, k, cst, stream_row, next_x,
                              next_g);
    } else {
      GradRow<T, false, false>(gr, xr, weight, ga, dxr, fw, fb, cols, stats, k, cst, stream_row, next_x,
                               next_g);
    }
    if ((r - row_begin + 1) % kFlushRows == 0 || r + 1 == row_end) {
      flush(pw, fw);
      flush(pb, fb);
    }
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

#define OPBRIDGE_LAYER_NORM_ENTRY_POINTS(T, Suffix)                                                         \
  void LayerNormForwardRows##Suffix(const T* x, const T* residual, const T* weight, const T* bias, T* y,    \
                                    T* sum, int64_t row_begin, int64_t row_end, int64_t cols, double eps,   \
                                    bool stream) {                                                          \
    ForwardRows<T>(x, residual, weight, bias, y, sum, row_begin, row_end, cols, eps, stream);               \
  }                                                                                                         \
  void LayerNormBackwardRows##Suffix(const T* grad_y, const T* grad_add, const T* x, const T* weight,       \
                                     T* grad_x, double* pw, double* pb, int64_t row_begin, int64_t row_end, \
                                     int64_t cols, double eps, bool stream) {                               \
    BackwardRows<T>(grad_y, grad_add, x, weight, grad_x, pw, pb, row_begin, row_end, cols, eps, stream);    \
  }
OPBRIDGE_LAYER_NORM_ENTRY_POINTS(float, F32)
OPBRIDGE_LAYER_NORM_ENTRY_POINTS(double, F64)
OPBRIDGE_LAYER_NORM_ENTRY_POINTS(Float16, F16)
OPBRIDGE_LAYER_NORM_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_LAYER_NORM_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(LayerNormForwardRowsF32);
HWY_EXPORT(LayerNormForwardRowsF64);
HWY_EXPORT(LayerNormForwardRowsF16);
HWY_EXPORT(LayerNormForwardRowsBF16);
HWY_EXPORT(LayerNormBackwardRowsF32);
HWY_EXPORT(LayerNormBackwardRowsF64);
HWY_EXPORT(LayerNormBackwardRowsF16);
HWY_EXPORT(LayerNormBackwardRowsBF16);

namespace {

template <typename T>
struct RowKernels;
#define OPBRIDGE_LAYER_NORM_ROW_KERNELS(T, Suffix)                                                   \
  template <>                                                                                        \
  struct RowKernels<T> {                                                                             \
    static void Forward(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum, \
                        int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) { \
      OPBRIDGE_DYNAMIC_DISPATCH(LayerNormForwardRows##Suffix)                                        \
      (x, residual, weight, bias, y, sum, row_begin, row_end, cols, eps, stream);                    \
    }                                                                                                \
    static void Backward(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x, \
                         double* pw, double* pb, int64_t row_begin, int64_t row_end, int64_t cols,   \
                         double eps, bool stream) {                                                  \
      OPBRIDGE_DYNAMIC_DISPATCH(LayerNormBackwardRows##Suffix)                                       \
      (grad_y, grad_add, x, weight, grad_x, pw, pb, row_begin, row_end, cols, eps, stream);          \
    }                                                                                                \
  };
OPBRIDGE_LAYER_NORM_ROW_KERNELS(float, F32)
OPBRIDGE_LAYER_NORM_ROW_KERNELS(double, F64)
OPBRIDGE_LAYER_NORM_ROW_KERNELS(Float16, F16)
OPBRIDGE_LAYER_NORM_ROW_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_LAYER_NORM_ROW_KERNELS

}  // namespace

template <typename T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                      const LayerNormAttrs& attrs, const ParallelFor& parallel_for) {
  LayerNormForwardOfSum<T>(x, nullptr, weight, bias, y, nullptr, rows, cols, attrs, parallel_for);
}

template <typename T>
void LayerNormForwardOfSum(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                           int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                           const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  const double eps = NormComputeEps<T>(attrs.eps);
  // The sum is read back right after it is written: never streamed.
  const bool stream = NormStreamsOutput<T>(rows * cols);
  DynamicFor(parallel_for, rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    RowKernels<T>::Forward(x, residual, weight, bias, y, sum, begin, end, cols, eps, stream);
  });
}

template <typename T>
void LayerNormBackward(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x,
                       T* grad_weight, T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                       const ParallelFor& parallel_for) {
  const double eps = NormComputeEps<T>(attrs.eps);
  const bool stream = NormStreamsOutput<T>(rows * cols);
  NormBackwardChunks(rows, cols, grad_weight, grad_bias, parallel_for,
                     [=](double* pw, double* pb, int64_t row_begin, int64_t row_end) {
                       RowKernels<T>::Backward(grad_y, grad_add, x, weight, grad_x, pw, pb, row_begin,
                                               row_end, cols, eps, stream);
                     });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void LayerNormForward<T>(const T*, const T*, const T*, T*, int64_t, int64_t,                    \
                                    const LayerNormAttrs&, const ParallelFor&);                            \
  template void LayerNormForwardOfSum<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                         const LayerNormAttrs&, const ParallelFor&);                       \
  template void LayerNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                     const LayerNormAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

Status LaunchLayerNorm(const KernelArgs& args) {
  return DispatchNormForward<NormResidual::kNone>(kLayerNormSpec, args, [&](const auto& t) {
    LayerNormForward(t.x, t.weight, t.bias, t.y, t.rows, t.cols, LayerNormAttrs{t.eps}, args.parallel_for);
  });
}

// Backward inputs: grad_y, x, weight (or null); outputs: grad_x, grad_weight
// and grad_bias (each null when not needed).
Status LaunchLayerNormBackward(const KernelArgs& args) {
  return DispatchNormBackward<NormResidual::kNone>(kLayerNormSpec, "x", args, [&](const auto& t) {
    LayerNormBackward(t.grad_y, t.grad_sum, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias, t.rows,
                      t.cols, LayerNormAttrs{t.eps}, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
