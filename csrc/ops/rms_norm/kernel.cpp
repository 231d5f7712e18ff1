// rms_norm and add_rms_norm kernels on the row skeleton
// (opbridge/toolkit/rows-inl.h): compiled once per SIMD target (foreach_target
// re-includes this file) and dispatched at run time to the best target the
// CPU supports. Each row is read from memory once: the sum-of-squares pass
// brings it into cache and the scaling pass re-reads it from there while the
// next row is fetched.
//
// The tensors' slots (RowTensors):
//   forward   in: x, residual (add only)   columns: weight, bias (or null)
//             out: y, sum = x + residual (add only)   params: eps
//   backward  in: grad_y, x (the saved sum for add), grad_add (or null)
//             columns: weight   out: grad_x   column sums: grad_weight, grad_bias
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rms_norm/kernel.cpp"
#include "ops/rms_norm/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cmath>

#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"
#include "ops/rms_norm/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = toolkit::rows;
using ::opbridge::toolkit::RowRange;
using ::opbridge::toolkit::RowTensors;

// y = s * rstd * w (+ b) with s = x, or with kAdd s = x + residual as T holds
// it (written to the sum output in the first pass, recomputed from cache in
// the second so that both outputs may bypass the cache).
template <typename T, bool kAdd, bool kBias>
void ForwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const double inv_cols = 1.0 / static_cast<double>(t.cols);
  const double eps = t.params[0];
  const T* weight = t.columns[0];
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    double sum_squares;
    if constexpr (kAdd) {
      sum_squares = rows::ForColumns(
          rows::PassOf(t).Write(row.out[1]),
          [](auto d, auto x, auto r) {
            const auto s = rows::Round<T>(d, hn::Add(x, r));
            return rows::Writes(s) + rows::SumProducts(s, s);
          },
          row.in[0], row.in[1])[0];
    } else {
      sum_squares = rows::ForColumns(
          rows::PassOf(t), [](auto, auto x) { return rows::SumProducts(x, x); }, row.in[0])[0];
    }
    const C rstd = static_cast<C>(1.0 / std::sqrt(sum_squares * inv_cols + eps));
    auto pass = rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]);
    // b: the bias where there is one.
    auto scale = [rstd](auto d, auto s, auto w, auto... b) {
      const auto v = hn::Mul(s, hn::Set(d, rstd));
      if constexpr (sizeof...(b) > 0) {
        return rows::Writes(hn::MulAdd(v, w, b...));
      } else {
        return rows::Writes(hn::Mul(v, w));
      }
    };
    if constexpr (kAdd) {
      auto scale_sum = [&](auto d, auto x, auto r, auto w, auto... b) {
        return scale(d, rows::Round<T>(d, hn::Add(x, r)), w, b...);
      };
      pass.Prefetch(row.next[1]);
      if constexpr (kBias) {
        rows::ForColumns(pass, scale_sum, row.in[0], row.in[1], weight, t.columns[1]);
      } else {
        rows::ForColumns(pass, scale_sum, row.in[0], row.in[1], weight);
      }
    } else if constexpr (kBias) {
      rows::ForColumns(pass, scale, row.in[0], weight, t.columns[1]);
    } else {
      rows::ForColumns(pass, scale, row.in[0], weight);
    }
  });
}

template <typename T>
void RmsNormForwardRange(const RowTensors<T>& t, const RowRange& range) {
  const bool add = t.in[1] != nullptr, bias = t.columns[1] != nullptr;
  if (add) {
    if (bias) {
      ForwardRange<T, true, true>(t, range);
    } else {
      ForwardRange<T, true, false>(t, range);
    }
  } else if (bias) {
    ForwardRange<T, false, true>(t, range);
  } else {
    ForwardRange<T, false, false>(t, range);
  }
}

// dx = rstd * g * w - rstd^3 * mean(g * w * x) * x (+ grad_add);
// grad_weight += g * x * rstd; grad_bias += g.
template <typename T, bool kAdd>
void BackwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = ComputeType<T>;
  const double inv_cols = 1.0 / static_cast<double>(t.cols);
  const double eps = t.params[0];
  const T* weight = t.columns[0];
  rows::ForEachRowWithColumnSums(t, range, [&](const rows::Row<T>& row, C* const* columns) {
    const auto sums = rows::ForColumns(
        rows::PassOf(t),
        [](auto, auto g, auto x, auto w) { return rows::SumProducts(x, x, hn::Mul(g, w), x); }, row.in[0],
        row.in[1], weight);
    const double rstd = 1.0 / std::sqrt(sums[0] * inv_cols + eps);
    const C rstd_c = static_cast<C>(rstd);
    const C coef = static_cast<C>(rstd * rstd * rstd * sums[1] * inv_cols);
    auto grad = [rstd_c, coef](auto d, auto g, auto x, auto w) {
      const auto rstd_v = hn::Set(d, rstd_c);
      const auto dx = hn::NegMulAdd(hn::Set(d, coef), x, hn::Mul(rstd_v, hn::Mul(g, w)));
      return rows::Writes(dx) + rows::ColumnProducts(hn::Mul(g, x), rstd_v) + rows::Columns(g);
    };
    auto pass = rows::PassOf(t).Write(row.out[0]).ColumnSums(columns);
    if constexpr (kAdd) {
      rows::ForColumns(
          pass,
          [&](auto d, auto g, auto x, auto w, auto ga) {
            auto step = grad(d, g, x, w);
            step.writes[0] = hn::Add(step.writes[0], ga);
            return step;
          },
          row.in[0], row.in[1], weight, row.in[2]);
    } else {
      rows::ForColumns(pass, grad, row.in[0], row.in[1], weight);
    }
  });
}

template <typename T>
void RmsNormBackwardRange(const RowTensors<T>& t, const RowRange& range) {
  if (t.in[2] != nullptr) {
    BackwardRange<T, true>(t, range);
  } else {
    BackwardRange<T, false>(t, range);
  }
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(RmsNormForwardRows, RmsNormForwardRange);
OPBRIDGE_ROWS_ENTRY_POINTS(RmsNormBackwardRows, RmsNormBackwardRange);

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

using toolkit::RowRange;
using toolkit::RowTensors;

OPBRIDGE_ROWS_EXPORT(RmsNormForwardRows);
OPBRIDGE_ROWS_EXPORT(RmsNormBackwardRows);

template <typename T>
void RmsNormForwardOfSum(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* sum,
                         int64_t rows, int64_t cols, const RmsNormAttrs& attrs,
                         const ParallelFor& parallel_for) {
  // With the add, both outputs together decide whether to bypass the cache.
  const RowTensors<T> t = NormForwardRowTensors<T>({x, residual, weight, bias, y, sum, rows, cols, attrs.eps},
                                                   residual != nullptr ? 2 : 1);
  toolkit::ForRowRanges(rows, cols, parallel_for,
                        [&](const RowRange& range) { RmsNormForwardRows<T>(t, range); });
}

template <typename T>
void RmsNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                    const RmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  RmsNormForwardOfSum<T>(x, nullptr, weight, bias, y, nullptr, rows, cols, attrs, parallel_for);
}

template <typename T>
void RmsNormBackwardWithAdd(const T* grad_y, const T* grad_add, const T* x, const T* weight, T* grad_x,
                            T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                            const RmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  const RowTensors<T> t = NormBackwardRowTensors<T>(
      {grad_y, grad_add, x, weight, grad_x, grad_weight, grad_bias, rows, cols, attrs.eps});
  toolkit::ForRowChunksWithColumnSums<T>(rows, cols, {grad_weight, grad_bias}, parallel_for,
                                         [&](const RowRange& range) { RmsNormBackwardRows<T>(t, range); });
}

template <typename T>
void RmsNormBackward(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight, T* grad_bias,
                     int64_t rows, int64_t cols, const RmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  RmsNormBackwardWithAdd<T>(grad_y, nullptr, x, weight, grad_x, grad_weight, grad_bias, rows, cols, attrs,
                            parallel_for);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void RmsNormForward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, const RmsNormAttrs&, \
                                  const ParallelFor&);                                                     \
  template void RmsNormForwardOfSum<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,   \
                                       const RmsNormAttrs&, const ParallelFor&);                           \
  template void RmsNormBackward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,             \
                                   const RmsNormAttrs&, const ParallelFor&);                               \
  template void RmsNormBackwardWithAdd<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,     \
                                          int64_t, const RmsNormAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

Status LaunchRmsNorm(const KernelArgs& args) {
  return DispatchNormForward<NormResidual::kNone>(kRmsNormSpec, args, [&](const auto& t) {
    RmsNormForward(t.x, t.weight, t.bias, t.y, t.rows, t.cols, RmsNormAttrs{t.eps}, args.parallel_for);
  });
}

// Backward inputs: grad_y, x, weight; outputs: grad_x, grad_weight, grad_bias
// (null when the bias has no gradient to compute).
Status LaunchRmsNormBackward(const KernelArgs& args) {
  return DispatchNormBackward<NormResidual::kNone>(kRmsNormSpec, "x", args, [&](const auto& t) {
    RmsNormBackward(t.grad_y, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias, t.rows, t.cols,
                    RmsNormAttrs{t.eps}, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
