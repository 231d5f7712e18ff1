// layer_norm and add_layer_norm kernels on the row skeleton
// (opbridge/toolkit/rows-inl.h): compiled once per SIMD target (foreach_target
// re-includes this file) and dispatched at run time to the best target the
// CPU supports. Each row is read from memory once: the first
// pass (the mean) brings it into cache, the variance pass and the writing
// pass re-read it from there.
//
// The variance is the second pass's sum of squared deviations from the
// first pass's mean, corrected by the deviations' own mean (which is the
// rounding error of the first mean): no cancellation however far the mean
// lies from zero. The normalized value subtracts that mean as two parts
// (the rounded mean, then the correction), so a row whose mean is large
// next to its spread keeps its precision.
//
// The tensors' slots (RowTensors):
//   forward   in: x, residual (add only)   columns: weight, bias (each or null)
//             out: y, sum = x + residual (add only)   params: eps
//   backward  in: grad_y, x (the saved sum for add), grad_add (or null)
//             columns: weight (or null)   out: grad_x
//             column sums: grad_weight, grad_bias
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/kernel.cpp"
#include "ops/layer_norm/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"
#include "ops/layer_norm/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = toolkit::rows;
using ::opbridge::toolkit::RowRange;
using ::opbridge::toolkit::RowTensors;

// The row's statistics: mean = shift + delta, rstd = 1 / sqrt(var + eps).
template <typename C>
struct RowStats {
  C shift;
  double delta;
  double rstd;
};

// From sum_j v_j (pass 1) and the sums of c_j = v_j - shift and c_j^2
// (pass 2): the deviations' own mean corrects the first mean's rounding.
template <typename C>
RowStats<C> StatsOf(double sum, double c, double cc, int64_t cols, double eps) {
  const double inv_cols = 1.0 / static_cast<double>(cols);
  RowStats<C> stats;
  stats.shift = static_cast<C>(sum * inv_cols);
  stats.delta = c * inv_cols;
  const double var = std::max(0.0, cc * inv_cols - stats.delta * stats.delta);
  stats.rstd = 1.0 / std::sqrt(var + eps);
  return stats;
}

// Rows of the forward: y = (v - shift) * rstd - delta * rstd (* w) (+ b),
// v = x, or with kAdd v = x + residual as T holds it (written to the sum
// output in pass 1, never streamed: passes 2 and 3 read it back from cache).
// The deviation v - shift is exact where v is near the mean, and delta (the
// first mean's rounding error, in double) is scaled before it is rounded to
// C: rounded as it is, a subnormal delta would carry an error of rstd times
// the subnormal spacing into every output.
template <typename T, bool kAdd, bool kWeight, bool kBias>
void ForwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const T* v = row.in[0];
    double total;
    if constexpr (kAdd) {
      total = rows::ForColumns(
          rows::PassOf(t).Stream(false).Write(row.out[1]),
          [](auto d, auto x, auto r) {
            const auto s = rows::Round<T>(d, hn::Add(x, r));
            return rows::Writes(s) + rows::Sums(s);
          },
          row.in[0], row.in[1])[0];
      v = row.out[1];
    } else {
      total = rows::ForColumns(
          rows::PassOf(t), [](auto, auto x) { return rows::Sums(x); }, v)[0];
    }
    const C shift = static_cast<C>(total / static_cast<double>(t.cols));
    const auto centered = rows::ForColumns(
        rows::PassOf(t),
        [shift](auto d, auto x) {
          const auto c = hn::Sub(x, hn::Set(d, shift));
          return rows::Sums(c) + rows::SumProducts(c, c);
        },
        v);
    const RowStats<C> s = StatsOf<C>(total, centered[0], centered[1], t.cols, t.params[0]);
    const C rstd = static_cast<C>(s.rstd), delta_rstd = static_cast<C>(s.delta * s.rstd);
    // wb: the weight and the bias where there are.
    auto normalize = [shift, rstd, delta_rstd](auto d, auto x, auto... wb) {
      const auto y =
          hn::Sub(hn::Mul(hn::Sub(x, hn::Set(d, shift)), hn::Set(d, rstd)), hn::Set(d, delta_rstd));
      const hn::VFromD<decltype(d)> p[sizeof...(wb) + 1] = {wb..., y};
      if constexpr (kWeight && kBias) return rows::Writes(hn::MulAdd(y, p[0], p[1]));
      if constexpr (kWeight && !kBias) return rows::Writes(hn::Mul(y, p[0]));
      if constexpr (!kWeight && kBias) return rows::Writes(hn::Add(y, p[0]));
      if constexpr (!kWeight && !kBias) return rows::Writes(y);
    };
    // The next row's input is fetched while this one is written (x; the
    // add's second input is fetched by its own pass).
    const auto pass = rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]);
    if constexpr (kWeight && kBias) {
      rows::ForColumns(pass, normalize, v, t.columns[0], t.columns[1]);
    } else if constexpr (kWeight) {
      rows::ForColumns(pass, normalize, v, t.columns[0]);
    } else if constexpr (kBias) {
      rows::ForColumns(pass, normalize, v, t.columns[1]);
    } else {
      rows::ForColumns(pass, normalize, v);
    }
  });
}

template <typename T, bool kAdd>
void ForwardAffine(const RowTensors<T>& t, const RowRange& range) {
  const bool weight = t.columns[0] != nullptr, bias = t.columns[1] != nullptr;
  if (weight && bias) {
    ForwardRange<T, kAdd, true, true>(t, range);
  } else if (weight) {
    ForwardRange<T, kAdd, true, false>(t, range);
  } else if (bias) {
    ForwardRange<T, kAdd, false, true>(t, range);
  } else {
    ForwardRange<T, kAdd, false, false>(t, range);
  }
}

template <typename T>
void LayerNormForwardRange(const RowTensors<T>& t, const RowRange& range) {
  if (t.in[1] != nullptr) {
    ForwardAffine<T, true>(t, range);
  } else {
    ForwardAffine<T, false>(t, range);
  }
}

// Rows of the backward, with c = x - shift and gw = g (* w):
//   dx = rstd * (gw - mean(gw)) - rstd^3 * mean(gw * (x - mean)) * (x - mean)
//      = rstd * gw + cst - k * c (+ grad_add);
//   grad_weight += g * xhat, xhat = (c - delta) * rstd; grad_bias += g.
template <typename T, bool kWeight, bool kAdd>
void BackwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const double inv_cols = 1.0 / static_cast<double>(t.cols);
  const T* w = t.columns[0];
  rows::ForEachRowWithColumnSums(t, range, [&](const rows::Row<T>& row, C* const* columns) {
    const T* g = row.in[0];
    const T* x = row.in[1];
    const double total = rows::ForColumns(
        rows::PassOf(t), [](auto, auto v) { return rows::Sums(v); }, x)[0];
    const C shift = static_cast<C>(total * inv_cols);
    auto centered_body = [shift](auto d, auto xv, auto gv, auto... wv) {
      const auto c = hn::Sub(xv, hn::Set(d, shift));
      const hn::VFromD<decltype(d)> p[sizeof...(wv) + 1] = {wv..., gv};
      const auto gw = kWeight ? hn::Mul(gv, p[0]) : gv;
      return rows::Sums(c) + rows::SumProducts(c, c) + rows::Sums(gw) + rows::SumProducts(gw, c);
    };
    std::array<double, 4> sums;
    if constexpr (kWeight) {
      sums = rows::ForColumns(rows::PassOf(t), centered_body, x, g, w);
    } else {
      sums = rows::ForColumns(rows::PassOf(t), centered_body, x, g);
    }
    const RowStats<C> s = StatsOf<C>(total, sums[0], sums[1], t.cols, t.params[0]);
    const double mean_gw = sums[2] * inv_cols;
    const double mean_gwc = sums[3] * inv_cols - s.delta * mean_gw;
    const double k = s.rstd * s.rstd * s.rstd * mean_gwc;
    const double cst = k * s.delta - s.rstd * mean_gw;
    const C rstd_c = static_cast<C>(s.rstd), delta_c = static_cast<C>(s.delta);
    const C k_c = static_cast<C>(k), cst_c = static_cast<C>(cst);
    // rest: the weight, then grad_add, where there are.
    auto grad = [shift, rstd_c, delta_c, k_c, cst_c](auto d, auto gv, auto xv, auto... rest) {
      const auto rstd = hn::Set(d, rstd_c);
      const auto c = hn::Sub(xv, hn::Set(d, shift));
      const hn::VFromD<decltype(d)> p[sizeof...(rest) + 1] = {rest..., gv};
      const auto gw = kWeight ? hn::Mul(gv, p[0]) : gv;
      auto dx = hn::MulAdd(rstd, gw, hn::NegMulAdd(hn::Set(d, k_c), c, hn::Set(d, cst_c)));
      if constexpr (kAdd) dx = hn::Add(dx, p[kWeight ? 1 : 0]);
      return rows::Writes(dx) + rows::ColumnProducts(gv, hn::Mul(hn::Sub(c, hn::Set(d, delta_c)), rstd)) +
             rows::Columns(gv);
    };
    // While this row is finished from cache, the next row is fetched.
    const auto pass =
        rows::PassOf(t).Write(row.out[0]).ColumnSums(columns).Prefetch(row.next[1]).Prefetch(row.next[0]);
    if constexpr (kWeight && kAdd) {
      rows::ForColumns(pass, grad, g, x, w, row.in[2]);
    } else if constexpr (kWeight) {
      rows::ForColumns(pass, grad, g, x, w);
    } else if constexpr (kAdd) {
      rows::ForColumns(pass, grad, g, x, row.in[2]);
    } else {
      rows::ForColumns(pass, grad, g, x);
    }
  });
}

template <typename T>
void LayerNormBackwardRange(const RowTensors<T>& t, const RowRange& range) {
  const bool weight = t.columns[0] != nullptr, add = t.in[2] != nullptr;
  if (weight && add) {
    BackwardRange<T, true, true>(t, range);
  } else if (weight) {
    BackwardRange<T, true, false>(t, range);
  } else if (add) {
    BackwardRange<T, false, true>(t, range);
  } else {
    BackwardRange<T, false, false>(t, range);
  }
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(LayerNormForwardRows, LayerNormForwardRange);
OPBRIDGE_ROWS_ENTRY_POINTS(LayerNormBackwardRows, LayerNormBackwardRange);

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

using toolkit::RowRange;
using toolkit::RowTensors;

OPBRIDGE_ROWS_EXPORT(LayerNormForwardRows);
OPBRIDGE_ROWS_EXPORT(LayerNormBackwardRows);

template <typename T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                      const LayerNormAttrs& attrs, const ParallelFor& parallel_for) {
  LayerNormForwardOfSum<T>(x, nullptr, weight, bias, y, nullptr, rows, cols, attrs, parallel_for);
}

template <typename T>
void LayerNormForwardOfSum(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                           int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                           const ParallelFor& parallel_for) {
  // The sum is read back right after it is written: never streamed.
  const RowTensors<T> t =
      NormForwardRowTensors<T>({x, residual, weight, bias, y, sum, rows, cols, attrs.eps});
  toolkit::ForRowRanges(rows, cols, parallel_for,
                        [&](const RowRange& range) { LayerNormForwardRows<T>(t, range); });
}

template <typename T>
void LayerNormBackward(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x,
                       T* grad_weight, T* grad_bias, int64_t rows, int64_t cols, const LayerNormAttrs& attrs,
                       const ParallelFor& parallel_for) {
  const RowTensors<T> t = NormBackwardRowTensors<T>(
      {grad_y, grad_add, x, weight, grad_x, grad_weight, grad_bias, rows, cols, attrs.eps});
  toolkit::ForRowChunksWithColumnSums<T>(rows, cols, {grad_weight, grad_bias}, parallel_for,
                                         [&](const RowRange& range) { LayerNormBackwardRows<T>(t, range); });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void LayerNormForward<T>(const T*, const T*, const T*, T*, int64_t, int64_t,                    \
                                    const LayerNormAttrs&, const ParallelFor&);                            \
  template void LayerNormForwardOfSum<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                         const LayerNormAttrs&, const ParallelFor&);                       \
  template void LayerNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                     const LayerNormAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
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
