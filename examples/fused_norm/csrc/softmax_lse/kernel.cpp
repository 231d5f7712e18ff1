// softmax_lse's kernels on the SDK's row skeleton (opbridge/toolkit/rows-inl.h).
// Forward, per row of z = x / temperature, three passes that take one exp
// per element: the row's maximum (rows::Maxes: the row comes into cache);
// e = exp(z - max) into a row of scratch with its sum (from cache, by the
// toolkit's ExpFast, while the next row is fetched); then y = e / sum,
// written past the cache. lse is a per-row output. Backward, per row: sum(grad_y * y), then grad_x.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "softmax_lse/kernel.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cmath>
#include <vector>

#include "opbridge/toolkit/math-inl.h"
#include "opbridge/toolkit/rows-inl.h"
#include "opbridge/toolkit/rows.h"
#include "softmax_lse/spec.h"

HWY_BEFORE_NAMESPACE();
namespace myops {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = opbridge::HWY_NAMESPACE::toolkit::rows;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;
using opbridge::toolkit::RowRange;
using opbridge::toolkit::RowTensors;

// Slots: in[0] x; out[0] y; per_row_out[0] lse; params[0] 1 / temperature.
template <typename T>
void SoftmaxLseRange(const RowTensors<T>& t, const RowRange& range) {
  using C = opbridge::ComputeType<T>;
  const C scale = static_cast<C>(t.params[0]);
  std::vector<T> scratch(static_cast<size_t>(t.cols));
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const double max = rows::ForColumns(
                           rows::PassOf(t), [](auto, auto x) { return rows::Maxes(x); }, row.in[0])[0] *
                       static_cast<double>(scale);
    // A row of -inf only (or of no columns): every e is 0, lse is -inf and
    // y is 0 / 0, NaN, as torch.softmax gives.
    const C shift = static_cast<C>(max == -HUGE_VAL ? 0.0 : max);
    const double sum = rows::ForColumns(
        rows::PassOf(t).Write(scratch.data()).Stream(false).Prefetch(row.next[0]),
        [scale, shift](auto d, auto x) {
          const auto e = tk::ExpFast(d, hn::MulSub(x, hn::Set(d, scale), hn::Set(d, shift)));
          return rows::Writes(e) + rows::Sums(e);
        },
        row.in[0])[0];
    const C inv_sum = static_cast<C>(1.0 / sum);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]),
        [inv_sum](auto d, auto e) { return rows::Writes(hn::Mul(e, hn::Set(d, inv_sum))); },
        static_cast<const T*>(scratch.data()));
    if (row.per_row_out[0] != nullptr) *row.per_row_out[0] = opbridge::FromDouble<T>(max + std::log(sum));
  });
}

// Slots: in[0] grad_y, in[1] y; per_row_in[0] grad_lse; out[0] grad_x;
// params[0] 1 / temperature. A gradient nobody sent (null) is zero.
//   grad_x = scale * y * (grad_y - sum(grad_y * y) + grad_lse)
template <typename T>
void SoftmaxLseBackwardRange(const RowTensors<T>& t, const RowRange& range) {
  using C = opbridge::ComputeType<T>;
  const double scale = t.params[0];
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const double grad_lse =
        row.per_row_in[0] != nullptr ? static_cast<double>(opbridge::ToFloat(*row.per_row_in[0])) : 0.0;
    if (row.in[0] == nullptr) {
      const C coef = static_cast<C>(scale * grad_lse);
      rows::ForColumns(
          rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[1]),
          [coef](auto d, auto y) { return rows::Writes(hn::Mul(y, hn::Set(d, coef))); }, row.in[1]);
      return;
    }
    const double dot = rows::ForColumns(
        rows::PassOf(t), [](auto, auto g, auto y) { return rows::SumProducts(g, y); }, row.in[0],
        row.in[1])[0];
    const C s = static_cast<C>(scale), shift = static_cast<C>(grad_lse - dot);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]).Prefetch(row.next[0]).Prefetch(row.next[1]),
        [s, shift](auto d, auto g, auto y) {
          return rows::Writes(hn::Mul(hn::Mul(y, hn::Set(d, s)), hn::Add(g, hn::Set(d, shift))));
        },
        row.in[0], row.in[1]);
  });
}

}  // namespace

OPBRIDGE_ROWS_ENTRY_POINTS(SoftmaxLseRows, SoftmaxLseRange);
OPBRIDGE_ROWS_ENTRY_POINTS(SoftmaxLseBackwardRows, SoftmaxLseBackwardRange);

}  // namespace HWY_NAMESPACE
}  // namespace myops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace myops {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::toolkit::RowRange;

OPBRIDGE_ROWS_EXPORT(SoftmaxLseRows);
OPBRIDGE_ROWS_EXPORT(SoftmaxLseBackwardRows);

// Inputs: x; outputs: y, lse (one per row). LaunchRows checks each tensor
// against what the kernel reads and writes before it runs.
Status LaunchSoftmaxLse(const KernelArgs& args) {
  const double temperature = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckTemperature(temperature));
  return opbridge::toolkit::LaunchRows(
      kSoftmaxLseSpec, args, 0,
      [&](auto& b) { b.In(0, 0).Out(0, 0).PerRowOut(0, 1).Param(0, 1.0 / temperature); },
      [&](const auto& t, int64_t rows) {
        using T = typename std::decay_t<decltype(t)>::Storage;
        opbridge::toolkit::ForRowRanges(rows, t.cols, args.parallel_for,
                                        [&](const RowRange& r) { SoftmaxLseRows<T>(t, r); });
      });
}

// Backward inputs: grad_y, grad_lse, y (either gradient may be absent);
// output: grad_x.
Status LaunchSoftmaxLseBackward(const KernelArgs& args) {
  const double temperature = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckTemperature(temperature));
  return opbridge::toolkit::LaunchRows(
      kSoftmaxLseSpec, args, 2,
      [&](auto& b) { b.In(0, 0).PerRowIn(0, 1).In(1, 2).Out(0, 0).Param(0, 1.0 / temperature); },
      [&](const auto& t, int64_t rows) {
        using T = typename std::decay_t<decltype(t)>::Storage;
        opbridge::toolkit::ForRowRanges(rows, t.cols, args.parallel_for,
                                        [&](const RowRange& r) { SoftmaxLseBackwardRows<T>(t, r); });
      });
}

}  // namespace myops
#endif  // HWY_ONCE
