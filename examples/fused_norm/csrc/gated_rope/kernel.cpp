// gated_rope's kernels on the SDK's toolkit. The problem is x split at its
// heads axis, [B * S, H, D] (toolkit::AxisSplit): for each position row
// (b, s) the D/2 angles' cosines and sines are computed once, in float64
// lanes (toolkit::SinCos; positions to 2^53 exact, where float32 angles
// would already be 2.4e-4 rad off at position 4096), rounded to the compute
// type and reused by the H heads of the row: the transcendental cost is
// divided by H. Each head's row is then one pass of multiply-adds with its
// gate broadcast (toolkit::ForOuterRanges). The backward computes grad_x in
// the same pass as the gate's gradient, summed over B, S and D in fixed
// chunks (toolkit::ForOuterChunksWithAxisSums): the same bits for any
// number of threads.
#ifndef MYOPS_GATED_ROPE_TENSORS_
#define MYOPS_GATED_ROPE_TENSORS_
#include <cstdint>

namespace myops {
// Values past dim / 2 in the frequency and angle buffers: whole vectors of
// any target (simd::kMaxLanes).
constexpr int64_t kRopePad = 64;

// One call's tensors as storage type T, and the angles' frequencies.
template <typename T>
struct RopeTensors {
  using Storage = T;
  const T* x = nullptr;       // [outer, heads, dim]
  const T* grad_y = nullptr;  // backward: [outer, heads, dim]
  const T* gate = nullptr;    // [heads]
  T* y = nullptr;             // forward: y; backward: grad_x (null: not wanted)
  const void* positions = nullptr;
  bool positions_int32 = false;
  const double* inv_freq = nullptr;  // [dim / 2], padded with zeros to whole vectors
  int64_t heads = 0;
  int64_t dim = 0;
};
}  // namespace myops
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gated_rope/kernel.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "gated_rope/spec.h"
#include "opbridge/checks.h"
#include "opbridge/simd-inl.h"
#include "opbridge/toolkit/axes.h"
#include "opbridge/toolkit/trig-inl.h"

HWY_BEFORE_NAMESPACE();
namespace myops {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace simd = opbridge::HWY_NAMESPACE::simd;
namespace tk = opbridge::HWY_NAMESPACE::toolkit;

template <typename T>
double PositionOf(const RopeTensors<T>& t, int64_t row) {
  return t.positions_int32 ? static_cast<double>(static_cast<const int32_t*>(t.positions)[row])
                           : static_cast<double>(static_cast<const int64_t*>(t.positions)[row]);
}

// c[i] = cos(position * inv_freq[i]), s[i] = sin(...), i < half (and the
// padding), computed in float64 lanes and stored as C.
template <typename C>
void Angles(double position, const double* inv_freq, int64_t half, C* c, C* s) {
  const hn::ScalableTag<double> dd;
  const int64_t n = static_cast<int64_t>(hn::Lanes(dd));
  const auto p = hn::Set(dd, position);
  for (int64_t i = 0; i < half; i += n) {
    hn::VFromD<decltype(dd)> sin, cos;
    tk::SinCos(dd, hn::Mul(p, hn::LoadU(dd, inv_freq + i)), &sin, &cos);
    if constexpr (std::is_same_v<C, double>) {
      hn::StoreU(cos, dd, c + i);
      hn::StoreU(sin, dd, s + i);
    } else {
      const hn::Rebind<float, decltype(dd)> df;
      hn::StoreU(hn::DemoteTo(df, cos), df, c + i);
      hn::StoreU(hn::DemoteTo(df, sin), df, s + i);
    }
  }
}

// y = g * (x1 c - x2 s, x2 c + x1 s) over one head's row.
template <typename T, typename C>
void RotateRow(const T* x, T* y, const C* c, const C* s, int64_t half, C gate) {
  const hn::ScalableTag<C> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto g = hn::Set(d, gate);
  int64_t i = 0;
  for (; i + n <= half; i += n) {
    const auto x1 = simd::ReadLanes(d, x + i);
    const auto x2 = simd::ReadLanes(d, x + half + i);
    const auto cv = hn::LoadU(d, c + i);
    const auto sv = hn::LoadU(d, s + i);
    simd::WriteLanes(d, hn::Mul(g, hn::MulSub(x1, cv, hn::Mul(x2, sv))), y + i);
    simd::WriteLanes(d, hn::Mul(g, hn::MulAdd(x2, cv, hn::Mul(x1, sv))), y + half + i);
  }
  if (i < half) {
    T buffer[simd::kMaxLanes];
    const int64_t rest = half - i;
    const auto x1 = simd::ReadTail(d, x + i, rest, buffer);
    const auto x2 = simd::ReadTail(d, x + half + i, rest, buffer);
    const auto cv = hn::LoadU(d, c + i);
    const auto sv = hn::LoadU(d, s + i);
    simd::WriteTail(d, hn::Mul(g, hn::MulSub(x1, cv, hn::Mul(x2, sv))), y + i, rest, buffer);
    simd::WriteTail(d, hn::Mul(g, hn::MulAdd(x2, cv, hn::Mul(x1, sv))), y + half + i, rest, buffer);
  }
}

// One head's row of the backward: grad_x (when wanted) = g * the inverse
// rotation of grad_y; returns sum over the row of grad_y * rotate(x).
template <typename T, typename C>
double RotateRowBackward(const T* x, const T* dy, T* dx, const C* c, const C* s, int64_t half, C gate) {
  const hn::ScalableTag<C> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto g = hn::Set(d, gate);
  auto dot = hn::Zero(d);
  T buffer[simd::kMaxLanes];
  for (int64_t i = 0; i < half; i += n) {
    const int64_t rest = half - i < n ? half - i : n;
    const bool tail = rest < n;
    const auto x1 = tail ? simd::ReadTail(d, x + i, rest, buffer) : simd::ReadLanes(d, x + i);
    const auto x2 = tail ? simd::ReadTail(d, x + half + i, rest, buffer) : simd::ReadLanes(d, x + half + i);
    const auto g1 = tail ? simd::ReadTail(d, dy + i, rest, buffer) : simd::ReadLanes(d, dy + i);
    const auto g2 = tail ? simd::ReadTail(d, dy + half + i, rest, buffer) : simd::ReadLanes(d, dy + half + i);
    const auto cv = hn::LoadU(d, c + i);
    const auto sv = hn::LoadU(d, s + i);
    // Zero-padded tails add nothing.
    dot = hn::MulAdd(g1, hn::MulSub(x1, cv, hn::Mul(x2, sv)), dot);
    dot = hn::MulAdd(g2, hn::MulAdd(x2, cv, hn::Mul(x1, sv)), dot);
    if (dx == nullptr) continue;
    const auto d1 = hn::Mul(g, hn::MulAdd(g1, cv, hn::Mul(g2, sv)));
    const auto d2 = hn::Mul(g, hn::MulSub(g2, cv, hn::Mul(g1, sv)));
    if (tail) {
      simd::WriteTail(d, d1, dx + i, rest, buffer);
      simd::WriteTail(d, d2, dx + half + i, rest, buffer);
    } else {
      simd::WriteLanes(d, d1, dx + i);
      simd::WriteLanes(d, d2, dx + half + i);
    }
  }
  return static_cast<double>(hn::GetLane(hn::SumOfLanes(d, dot)));
}

template <typename T>
void ForwardRange(const RopeTensors<T>& t, int64_t begin, int64_t end) {
  using C = opbridge::ComputeType<T>;
  const int64_t half = t.dim / 2;
  std::vector<C> c(static_cast<size_t>(half + kRopePad)), s(static_cast<size_t>(half + kRopePad));
  for (int64_t o = begin; o < end; ++o) {
    Angles(PositionOf(t, o), t.inv_freq, half, c.data(), s.data());
    for (int64_t h = 0; h < t.heads; ++h) {
      const int64_t at = (o * t.heads + h) * t.dim;
      RotateRow(t.x + at, t.y + at, c.data(), s.data(), half, static_cast<C>(opbridge::ToFloat(t.gate[h])));
    }
  }
}

// sums: [heads] partials of the gate's gradient (null: not wanted).
template <typename T>
void BackwardRange(const RopeTensors<T>& t, int64_t begin, int64_t end, double* sums) {
  using C = opbridge::ComputeType<T>;
  const int64_t half = t.dim / 2;
  std::vector<C> c(static_cast<size_t>(half + kRopePad)), s(static_cast<size_t>(half + kRopePad));
  for (int64_t o = begin; o < end; ++o) {
    Angles(PositionOf(t, o), t.inv_freq, half, c.data(), s.data());
    for (int64_t h = 0; h < t.heads; ++h) {
      const int64_t at = (o * t.heads + h) * t.dim;
      const double dot =
          RotateRowBackward(t.x + at, t.grad_y + at, t.y == nullptr ? nullptr : t.y + at, c.data(), s.data(),
                            half, static_cast<C>(opbridge::ToFloat(t.gate[h])));
      if (sums != nullptr) sums[h] += dot;
    }
  }
}

}  // namespace

#define MYOPS_ROPE_TYPES(X) \
  X(F32, float)             \
  X(F64, double)            \
  X(F16, opbridge::Float16) \
  X(BF16, opbridge::BFloat16)
#define MYOPS_ROPE_ENTRY(SUFFIX, T)                                                                \
  void GatedRopeForward##SUFFIX(const RopeTensors<T>& t, int64_t begin, int64_t end) {             \
    ForwardRange(t, begin, end);                                                                   \
  }                                                                                                \
  void GatedRopeBackward##SUFFIX(const RopeTensors<T>& t, int64_t begin, int64_t end, double* s) { \
    BackwardRange(t, begin, end, s);                                                               \
  }
MYOPS_ROPE_TYPES(MYOPS_ROPE_ENTRY)
#undef MYOPS_ROPE_ENTRY

}  // namespace HWY_NAMESPACE
}  // namespace myops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace myops {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::toolkit::AxisSplit;

#define MYOPS_ROPE_EXPORT(SUFFIX, T)    \
  HWY_EXPORT(GatedRopeForward##SUFFIX); \
  HWY_EXPORT(GatedRopeBackward##SUFFIX);
MYOPS_ROPE_TYPES(MYOPS_ROPE_EXPORT)
#undef MYOPS_ROPE_EXPORT

namespace {

// The best target's entry point for T.
template <typename T>
void Forward(const RopeTensors<T>& t, int64_t begin, int64_t end) {
#define MYOPS_ROPE_CALL(SUFFIX, U) \
  if constexpr (std::is_same_v<T, U>) OPBRIDGE_DYNAMIC_DISPATCH(GatedRopeForward##SUFFIX)(t, begin, end);
  MYOPS_ROPE_TYPES(MYOPS_ROPE_CALL)
#undef MYOPS_ROPE_CALL
}
template <typename T>
void Backward(const RopeTensors<T>& t, int64_t begin, int64_t end, double* sums) {
#define MYOPS_ROPE_CALL(SUFFIX, U)    \
  if constexpr (std::is_same_v<T, U>) \
    OPBRIDGE_DYNAMIC_DISPATCH(GatedRopeBackward##SUFFIX)(t, begin, end, sums);
  MYOPS_ROPE_TYPES(MYOPS_ROPE_CALL)
#undef MYOPS_ROPE_CALL
}

Status CheckBase(double base) {
  if (!(base > 0.0) || !std::isfinite(base)) {
    return opbridge::ArgError(kGatedRopeSpec, "base",
                              "must be positive and finite, got " + std::to_string(base));
  }
  return Status::Ok();
}

// base^(-2i / D) for i < D/2, in double, padded with zeros.
std::vector<double> InverseFrequencies(double base, int64_t dim) {
  const int64_t half = dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half + kRopePad), 0.0);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
  }
  return inv_freq;
}

// The call's tensors, each checked as the kernel reads or writes it.
// x_input: where x is among the call's inputs; positions and gate follow the
// layout of the forward (x, positions, gate) or the backward (grad_y, x,
// positions, gate).
template <typename T>
Status Bind(const KernelArgs& args, bool backward, RopeTensors<T>* t, AxisSplit* split) {
  const size_t x_input = backward ? 1 : 0;
  const opbridge::Shape& shape = args.input_infos[x_input].shape;
  *split = AxisSplit::Of(shape, 2);
  t->heads = split->size;
  t->dim = split->inner;
  const int64_t elements = split->elements();
  const opbridge::TensorInfo& positions = args.input_infos[x_input + 1];
  if (positions.dtype != "int64" && positions.dtype != "int32") {
    return opbridge::ArgError(kGatedRopeSpec, "positions",
                              "must be int64 or int32 in the kernel, got " + positions.dtype);
  }
  t->positions_int32 = positions.dtype == "int32";
  const auto take_positions = [&](auto* p) {
    const Status taken =
        opbridge::InputAs(kGatedRopeSpec, args, x_input + 1, split->outer, &p, "batch x seq");
    t->positions = p;
    return taken;
  };
  OPBRIDGE_RETURN_IF_ERROR(t->positions_int32 ? take_positions(static_cast<const int32_t*>(nullptr))
                                              : take_positions(static_cast<const int64_t*>(nullptr)));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::InputAs(kGatedRopeSpec, args, x_input, elements, &t->x, "x's"));
  OPBRIDGE_RETURN_IF_ERROR(
      opbridge::InputAs(kGatedRopeSpec, args, x_input + 2, t->heads, &t->gate, "one per head"));
  if (backward) {
    OPBRIDGE_RETURN_IF_ERROR(opbridge::InputAs(kGatedRopeSpec, args, 0, elements, &t->grad_y, "x's"));
  }
  return opbridge::OutputAs(kGatedRopeSpec, args, 0, elements, &t->y, "x's");
}

// CheckBase, then fn(tensors, split) with the call's tensors bound and
// checked (Bind) and the frequencies computed, for x's storage type.
template <typename Fn>
Status WithTensors(const KernelArgs& args, bool backward, Fn&& fn) {
  const double base = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckBase(base));
  Status result;
  const Status dispatched = opbridge::DispatchFloatingOrHalf(
      kGatedRopeSpec, "x", args.input_infos[backward ? 1 : 0].dtype, [&](auto tag) {
        RopeTensors<decltype(tag)> t;
        AxisSplit split;
        result = Bind(args, backward, &t, &split);
        if (!result.ok()) return;
        const std::vector<double> inv_freq = InverseFrequencies(base, t.dim);
        t.inv_freq = inv_freq.data();
        result = fn(t, split);
      });
  return dispatched.ok() ? result : dispatched;
}

}  // namespace

Status LaunchGatedRope(const KernelArgs& args) {
  return WithTensors(args, false, [&](const auto& t, const AxisSplit& split) {
    opbridge::toolkit::ForOuterRanges(split, args.parallel_for,
                                      [&](int64_t begin, int64_t end) { Forward(t, begin, end); });
    return Status::Ok();
  });
}

// Inputs: grad_y, x, positions, gate; outputs: grad_x, grad_gate (each null
// when not wanted).
Status LaunchGatedRopeBackward(const KernelArgs& args) {
  return WithTensors(args, true, [&](const auto& t, const AxisSplit& split) {
    using T = typename std::decay_t<decltype(t)>::Storage;
    T* grad_gate = nullptr;
    OPBRIDGE_RETURN_IF_ERROR(
        opbridge::OutputAs(kGatedRopeSpec, args, 1, t.heads, &grad_gate, "one per head"));
    opbridge::toolkit::ForOuterChunksWithAxisSums(
        split, {grad_gate}, args.parallel_for,
        [&](int64_t begin, int64_t end, double* const* sums) { Backward(t, begin, end, sums[0]); });
    return Status::Ok();
  });
}

}  // namespace myops
#endif  // HWY_ONCE
