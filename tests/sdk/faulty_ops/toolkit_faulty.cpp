// Operators written on the kernel toolkit whose shape rules disagree with
// their kernels, for the tests of the checks every toolkit launch makes
// (tests/sdk/test_faulty_ops.py): with OPBRIDGE_CHECK unset, each call is an
// error naming the op, the output and both sizes, and nothing is written.
// Each one is a bug a user could write; none is an example to follow.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "toolkit_faulty.cpp"  // this file, from an include directory
#include <hwy/foreach_target.h>                  // must come before highway.h
#include <hwy/highway.h>

#include "opbridge/toolkit/map-inl.h"
#include "opbridge/toolkit/rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace faulty {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
namespace rows = ::opbridge::HWY_NAMESPACE::toolkit::rows;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// y = 2 x.
struct Twice {
  explicit Twice(const tk::Params&) {}
  template <class D, class V>
  HWY_INLINE V operator()(D, V x) const {
    return hn::Add(x, x);
  }
};

// grad_x = 2 grad_y.
struct TwiceGrad {
  explicit TwiceGrad(const tk::Params&) {}
  template <class D, class V>
  HWY_INLINE V operator()(D, V grad_y, V) const {
    return hn::Add(grad_y, grad_y);
  }
};

// Per row: mean = sum(x) / cols (per-row output 0), y = x - mean (output 0).
template <typename T>
void CenterRange(const ::opbridge::toolkit::RowTensors<T>& t, const ::opbridge::toolkit::RowRange& range) {
  rows::ForEachRow(t, range, [&](const rows::Row<T>& row) {
    const auto sums = rows::ForColumns(
        rows::PassOf(t), [](auto, auto x) { return rows::Sums(x); }, row.in[0]);
    const double mean = sums[0] / static_cast<double>(t.cols);
    rows::ForColumns(
        rows::PassOf(t).Write(row.out[0]),
        [mean](auto d, auto x) { return rows::Writes(hn::Sub(x, rows::Set(d, mean))); }, row.in[0]);
    *row.per_row_out[0] = ::opbridge::FromDouble<T>(mean);
  });
}

OPBRIDGE_ROWS_ENTRY_POINTS(CenterRows, CenterRange);

}  // namespace HWY_NAMESPACE
}  // namespace faulty
HWY_AFTER_NAMESPACE();

OPBRIDGE_MAP_KERNEL(faulty, TwiceForward, Twice, 1, 1);
OPBRIDGE_MAP_KERNEL(faulty, TwiceBackward, TwiceGrad, 2, 1);

#if HWY_ONCE
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/spec.h"

namespace faulty {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::TensorInfo;

OPBRIDGE_ROWS_EXPORT(CenterRows);

extern const opbridge::OpSpec kShortMapSpec;
extern const opbridge::OpSpec kShortMapGradientSpec;
extern const opbridge::OpSpec kScalarRowStatSpec;
extern const opbridge::OpSpec kWideRowStatSpec;

namespace {

// y: x's shape with the last dimension 1 (the map writes all of x).
Status InferShortLast(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo y = inputs[0];
  if (!y.shape.empty()) y.shape.back() = 1;
  *outputs = {y};
  return Status::Ok();
}

Status InferSameAsX(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  *outputs = {inputs[0]};
  return Status::Ok();
}

// The backward's grad_x: one element (the map writes one per element of x).
Status InferOneElementGradient(const std::vector<TensorInfo>& inputs, const std::vector<opbridge::AttrValue>&,
                               std::vector<TensorInfo>* outputs) {
  TensorInfo grad = inputs[1];
  grad.shape = {1};
  *outputs = {grad};
  return Status::Ok();
}

// y like x, mean 0-d (the kernel writes one value per row).
Status InferScalarMean(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo mean = inputs[0];
  mean.shape = {};
  *outputs = {inputs[0], mean};
  return Status::Ok();
}

// y like x, mean one per row but float64 (the kernel writes x's dtype).
Status InferWideMean(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo mean = inputs[0];
  if (!mean.shape.empty()) mean.shape.pop_back();
  mean.dtype = "float64";
  *outputs = {inputs[0], mean};
  return Status::Ok();
}

Status LaunchTwice(const opbridge::OpSpec& spec, const KernelArgs& args) {
  return opbridge::toolkit::Map(TwiceForward, spec, args);
}

Status LaunchCenter(const opbridge::OpSpec& spec, const KernelArgs& args) {
  return opbridge::toolkit::LaunchRows(
      spec, args, 0, [](auto& b) { b.In(0, 0).Out(0, 0).PerRowOut(0, 1); },
      [&](const auto& t, int64_t rows) {
        using T = typename std::decay_t<decltype(t)>::Storage;
        opbridge::toolkit::ForRowRanges(rows, t.cols, args.parallel_for,
                                        [&](const opbridge::toolkit::RowRange& r) { CenterRows<T>(t, r); });
      });
}

Status LaunchShortMap(const KernelArgs& args) { return LaunchTwice(kShortMapSpec, args); }
Status LaunchShortMapGradientForward(const KernelArgs& args) {
  return LaunchTwice(kShortMapGradientSpec, args);
}
Status LaunchShortMapGradientBackward(const KernelArgs& args) {
  return opbridge::toolkit::Map(TwiceBackward, kShortMapGradientSpec, args);
}
Status LaunchScalarRowStat(const KernelArgs& args) { return LaunchCenter(kScalarRowStatSpec, args); }
Status LaunchWideRowStat(const KernelArgs& args) { return LaunchCenter(kWideRowStatSpec, args); }

}  // namespace

const opbridge::OpSpec kShortMapSpec =
    opbridge::OpSpec::Builder("short_map", "ShortMap")
        .Doc("A toolkit map whose shape rule is smaller than what it writes.")
        .Inputs({opbridge::Input("x")})
        .Outputs({"y"})
        .Infer(InferShortLast)
        .Forward(LaunchShortMap);

const opbridge::OpSpec kShortMapGradientSpec =
    opbridge::OpSpec::Builder("short_map_gradient", "ShortMapGradient")
        .Doc("A toolkit map whose backward shape rule is smaller than what its backward map writes.")
        .Inputs({opbridge::Input("x")})
        .Outputs({"y"})
        .Infer(InferSameAsX)
        .Forward(LaunchShortMapGradientForward)
        .Backward(LaunchShortMapGradientBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("x", 0)})
        .BackwardOutputs({opbridge::Gradient("grad_x")})
        .InferBackward(InferOneElementGradient)
        .InputGradients({0});

const opbridge::OpSpec kScalarRowStatSpec =
    opbridge::OpSpec::Builder("scalar_row_stat", "ScalarRowStat")
        .Doc("A row kernel writing one mean per row, whose shape rule makes the mean 0-d.")
        .Inputs({opbridge::Input("x")})
        .Outputs({"y", "mean"})
        .Infer(InferScalarMean)
        .Forward(LaunchScalarRowStat);

const opbridge::OpSpec kWideRowStatSpec =
    opbridge::OpSpec::Builder("wide_row_stat", "WideRowStat")
        .Doc("A row kernel writing one mean per row in x's dtype, whose shape rule declares it float64.")
        .Inputs({opbridge::Input("x")})
        .Outputs({"y", "mean"})
        .Infer(InferWideMean)
        .Forward(LaunchWideRowStat);

}  // namespace faulty

OPBRIDGE_REGISTER_SPEC(faulty::kShortMapSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kShortMapGradientSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kScalarRowStatSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kWideRowStatSpec)
#endif  // HWY_ONCE
