// pairwise_dot's kernels on the SDK's toolkit: features split at F,
// [B, F, D] (toolkit::AxisSplit), one batch row's F vectors held in cache
// while all its pairs are formed. Forward: for each i, the dot products with
// the vectors after it, four at a time (toolkit::RowDots). Backward:
// grad_features[i] = sum over j != i of grad_y[pair(i, j)] * features[j],
// one toolkit::AddScaledRows per i over the row's weights.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pairwise_dot/kernel.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/toolkit/axes.h"
#include "opbridge/toolkit/products-inl.h"
#include "pairwise_dot/spec.h"

HWY_BEFORE_NAMESPACE();
namespace myops {
namespace HWY_NAMESPACE {
namespace {

namespace tk = opbridge::HWY_NAMESPACE::toolkit;

// A batch row's values as the products read them: float32 and float64 in
// place; a 16-bit row widened once into `scratch` (each vector is read F - 1
// times, so widening it on every read would cost more than the products).
template <typename T>
const opbridge::ComputeType<T>* Widened(const T* row, int64_t count,
                                        std::vector<opbridge::ComputeType<T>>* scratch) {
  if constexpr (std::is_same_v<T, opbridge::ComputeType<T>>) {
    return row;
  } else {
    scratch->resize(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) (*scratch)[static_cast<size_t>(k)] = opbridge::ToFloat(row[k]);
    return scratch->data();
  }
}

// Batch rows [begin, end) of x [B, F, D] into y [B, F * (F - 1) / 2].
template <typename T>
void ForwardRange(const T* x, T* y, int64_t f, int64_t d, int64_t begin, int64_t end) {
  const int64_t pairs = f * (f - 1) / 2;
  std::vector<double> dots(static_cast<size_t>(std::max<int64_t>(f, 1)));
  std::vector<opbridge::ComputeType<T>> scratch;
  for (int64_t b = begin; b < end; ++b) {
    const auto* row = Widened(x + b * f * d, f * d, &scratch);
    T* out = y + b * pairs;
    for (int64_t i = 0; i + 1 < f; ++i) {
      const int64_t after = f - 1 - i;
      tk::RowDots(row + i * d, row + (i + 1) * d, after, d, dots.data());
      for (int64_t j = 0; j < after; ++j) *out++ = opbridge::FromDouble<T>(dots[static_cast<size_t>(j)]);
    }
  }
}

// Batch rows [begin, end) of grad_x from grad_y and x.
template <typename T>
void BackwardRange(const T* grad_y, const T* x, T* grad_x, int64_t f, int64_t d, int64_t begin, int64_t end) {
  using C = opbridge::ComputeType<T>;
  const int64_t pairs = f * (f - 1) / 2;
  std::vector<double> weights(static_cast<size_t>(f * f));
  std::vector<C> acc(static_cast<size_t>(d));
  std::vector<C> scratch;
  for (int64_t b = begin; b < end; ++b) {
    // The symmetric matrix of the row's pair gradients, zero on its diagonal.
    const T* g = grad_y + b * pairs;
    for (int64_t i = 0; i < f; ++i) {
      weights[static_cast<size_t>(i * f + i)] = 0.0;
      for (int64_t j = i + 1; j < f; ++j) {
        const double w = static_cast<double>(opbridge::ToFloat(*g++));
        weights[static_cast<size_t>(i * f + j)] = w;
        weights[static_cast<size_t>(j * f + i)] = w;
      }
    }
    const C* row = Widened(x + b * f * d, f * d, &scratch);
    T* out = grad_x + b * f * d;
    for (int64_t i = 0; i < f; ++i) {
      std::fill(acc.begin(), acc.end(), C(0));
      tk::AddScaledRows(weights.data() + i * f, row, f, d, acc.data());
      for (int64_t k = 0; k < d; ++k)
        out[i * d + k] = opbridge::FromFloat<T>(static_cast<float>(acc[static_cast<size_t>(k)]));
    }
  }
}

}  // namespace

#define MYOPS_PAIRWISE_TYPES(X) \
  X(F32, float)                 \
  X(F64, double)                \
  X(F16, opbridge::Float16)     \
  X(BF16, opbridge::BFloat16)
#define MYOPS_PAIRWISE_ENTRY(SUFFIX, T)                                                                 \
  void PairwiseDotForward##SUFFIX(const T* x, T* y, int64_t f, int64_t d, int64_t begin, int64_t end) { \
    ForwardRange(x, y, f, d, begin, end);                                                               \
  }                                                                                                     \
  void PairwiseDotBackward##SUFFIX(const T* g, const T* x, T* gx, int64_t f, int64_t d, int64_t begin,  \
                                   int64_t end) {                                                       \
    BackwardRange(g, x, gx, f, d, begin, end);                                                          \
  }
MYOPS_PAIRWISE_TYPES(MYOPS_PAIRWISE_ENTRY)
#undef MYOPS_PAIRWISE_ENTRY

}  // namespace HWY_NAMESPACE
}  // namespace myops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace myops {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::toolkit::AxisSplit;

#define MYOPS_PAIRWISE_EXPORT(SUFFIX, T)  \
  HWY_EXPORT(PairwiseDotForward##SUFFIX); \
  HWY_EXPORT(PairwiseDotBackward##SUFFIX);
MYOPS_PAIRWISE_TYPES(MYOPS_PAIRWISE_EXPORT)
#undef MYOPS_PAIRWISE_EXPORT

namespace {

template <typename T>
void Forward(const T* x, T* y, int64_t f, int64_t d, int64_t begin, int64_t end) {
#define MYOPS_PAIRWISE_CALL(SUFFIX, U) \
  if constexpr (std::is_same_v<T, U>)  \
    OPBRIDGE_DYNAMIC_DISPATCH(PairwiseDotForward##SUFFIX)(x, y, f, d, begin, end);
  MYOPS_PAIRWISE_TYPES(MYOPS_PAIRWISE_CALL)
#undef MYOPS_PAIRWISE_CALL
}
template <typename T>
void Backward(const T* g, const T* x, T* gx, int64_t f, int64_t d, int64_t begin, int64_t end) {
#define MYOPS_PAIRWISE_CALL(SUFFIX, U) \
  if constexpr (std::is_same_v<T, U>)  \
    OPBRIDGE_DYNAMIC_DISPATCH(PairwiseDotBackward##SUFFIX)(g, x, gx, f, d, begin, end);
  MYOPS_PAIRWISE_TYPES(MYOPS_PAIRWISE_CALL)
#undef MYOPS_PAIRWISE_CALL
}

}  // namespace

Status LaunchPairwiseDot(const KernelArgs& args) {
  const AxisSplit split = AxisSplit::Of(args.input_infos[0].shape, 1);  // [B, F, D]
  const int64_t pairs = split.size * (split.size - 1) / 2;
  Status bound;
  const Status dispatched = opbridge::DispatchFloatingOrHalf(
      kPairwiseDotSpec, "features", args.input_infos[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* x = nullptr;
        T* y = nullptr;
        bound = opbridge::InputAs(kPairwiseDotSpec, args, 0, split.elements(), &x, "B x F x D");
        if (bound.ok())
          bound = opbridge::OutputAs(kPairwiseDotSpec, args, 0, split.outer * pairs, &y, "B x pairs");
        if (!bound.ok()) return;
        if (split.inner == 0) {  // dot products of empty vectors
          std::fill(y, y + split.outer * pairs, opbridge::FromFloat<T>(0.0f));
          return;
        }
        opbridge::toolkit::ForOuterRanges(split, args.parallel_for, [&](int64_t begin, int64_t end) {
          Forward(x, y, split.size, split.inner, begin, end);
        });
      });
  return dispatched.ok() ? bound : dispatched;
}

// Backward inputs: grad_y, features; output: grad_features.
Status LaunchPairwiseDotBackward(const KernelArgs& args) {
  const AxisSplit split = AxisSplit::Of(args.input_infos[1].shape, 1);
  const int64_t pairs = split.size * (split.size - 1) / 2;
  Status bound;
  const Status dispatched = opbridge::DispatchFloatingOrHalf(
      kPairwiseDotSpec, "features", args.input_infos[1].dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* g = nullptr;
        const T* x = nullptr;
        T* gx = nullptr;
        bound = opbridge::InputAs(kPairwiseDotSpec, args, 0, split.outer * pairs, &g, "B x pairs");
        if (bound.ok())
          bound = opbridge::InputAs(kPairwiseDotSpec, args, 1, split.elements(), &x, "B x F x D");
        if (bound.ok())
          bound = opbridge::OutputAs(kPairwiseDotSpec, args, 0, split.elements(), &gx, "B x F x D");
        if (!bound.ok()) return;
        opbridge::toolkit::ForOuterRanges(split, args.parallel_for, [&](int64_t begin, int64_t end) {
          Backward(g, x, gx, split.size, split.inner, begin, end);
        });
      });
  return dispatched.ok() ? bound : dispatched;
}

}  // namespace myops
#endif  // HWY_ONCE
