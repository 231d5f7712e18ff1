// fused_norm's kernels on the SDK's row skeleton (opbridge/toolkit/rows-inl.h):
// per row, the sum of squares, then the scaling, each pass a lambda over
// vectors of columns. The skeleton compiles it for every SIMD target, reads
// each row from memory once (the second pass re-reads it from cache while the
// next row is fetched), sums in double where float sums would overflow, and
// adds the weight and bias gradients over fixed row chunks, so they do not
// depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fused_norm/kernel.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cmath>

#include "fused_norm/spec.h"
#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"

HWY_BEFORE_NAMESPACE();
namespace myops {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = opbridge::HWY_NAMESPACE::toolkit::rows;
using opbridge::toolkit::RowRange;
using opbridge::toolkit::RowTensors;

// Slots: in[0] x; columns[0] weight, columns[1] bias; out[0] y; params[0] eps.
// y = x * rstd * weight + bias, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
void ForwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = opbridge::ComputeType<T>;
  const double inv_cols = 1.0 / static_cast<double>(t.cols);
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const double sum_squares = rows::ForColumns(
        rows::PassOf(t), [](auto, auto x) { return rows::SumProducts(x, x); }, row.in[0])[0];
    const C rstd = static_cast<C>(1.0 / std::sqrt(sum_squares * inv_cols + t.params[0]));
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]),
        [rstd](auto d, auto x, auto w, auto b) {
          return rows::Writes(hn::MulAdd(hn::Mul(x, hn::Set(d, rstd)), w, b));
        },
        row.in[0], t.columns[0], t.columns[1]);
  });
}

// Slots: in[0] grad_y, in[1] x; columns[0] weight; out[0] grad_x; column sums
// grad_weight, grad_bias.
//   grad_x = rstd * g * w - rstd^3 * mean(g * w * x) * x
//   grad_weight = sum over rows of g * x * rstd;  grad_bias = sum over rows of g
template <typename T>
void BackwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = opbridge::ComputeType<T>;
  const double inv_cols = 1.0 / static_cast<double>(t.cols);
  rows::ForEachRowWithColumnSums(t, range, [&](const rows::Row<T>& row, C* const* columns) {
    const auto sums = rows::ForColumns(
        rows::PassOf(t),
        [](auto, auto g, auto x, auto w) { return rows::SumProducts(x, x, hn::Mul(g, w), x); }, row.in[0],
        row.in[1], t.columns[0]);
    const double rstd = 1.0 / std::sqrt(sums[0] * inv_cols + t.params[0]);
    const C rstd_c = static_cast<C>(rstd);
    const C coef = static_cast<C>(rstd * rstd * rstd * sums[1] * inv_cols);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).ColumnSums(columns),
        [rstd_c, coef](auto d, auto g, auto x, auto w) {
          const auto rstd_v = hn::Set(d, rstd_c);
          const auto dx = hn::NegMulAdd(hn::Set(d, coef), x, hn::Mul(rstd_v, hn::Mul(g, w)));
          return rows::Writes(dx) + rows::ColumnProducts(hn::Mul(g, x), rstd_v) + rows::Columns(g);
        },
        row.in[0], row.in[1], t.columns[0]);
  });
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(FusedNormForwardRows, ForwardRange);
OPBRIDGE_ROWS_ENTRY_POINTS(FusedNormBackwardRows, BackwardRange);

}  // namespace HWY_NAMESPACE
}  // namespace myops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "opbridge/norm_launch.h"

namespace myops {

using opbridge::KernelArgs;
using opbridge::NormResidual;
using opbridge::Status;
using opbridge::toolkit::RowRange;

OPBRIDGE_ROWS_EXPORT(FusedNormForwardRows);
OPBRIDGE_ROWS_EXPORT(FusedNormBackwardRows);

// The launch glue of opbridge/norm_launch.h: the dtype dispatch (the spec's
// shape rule has already refused every dtype but float32 and float64), the
// typed tensors, and the row kernels' slots filled from them.
Status LaunchFusedNorm(const KernelArgs& args) {
  return opbridge::DispatchNormForward<NormResidual::kNone>(kFusedNormSpec, args, [&](const auto& n) {
    const auto t = opbridge::NormForwardRowTensors(n);
    opbridge::toolkit::ForRowRanges(n.rows, n.cols, args.parallel_for,
                                    [&](const RowRange& range) { FusedNormForwardRows(t, range); });
  });
}

// Backward inputs: grad_y, x, weight; outputs: grad_x, grad_weight and
// grad_bias (each of the last two null when nobody needs it).
Status LaunchFusedNormBackward(const KernelArgs& args) {
  return opbridge::DispatchNormBackward<NormResidual::kNone>(kFusedNormSpec, "x", args, [&](const auto& n) {
    const auto t = opbridge::NormBackwardRowTensors(n);
    opbridge::toolkit::ForRowChunksWithColumnSums(
        n.rows, n.cols, {n.grad_weight, n.grad_bias}, args.parallel_for,
        [&](const RowRange& range) { FusedNormBackwardRows(t, range); });
  });
}

}  // namespace myops
#endif  // HWY_ONCE
