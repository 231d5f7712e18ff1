// rms_norm kernels, vectorized with Highway: compiled once per SIMD target
// (foreach_target re-includes this file) and dispatched at run time to the
// best target the CPU supports. Each row is read from memory once: the
// sum-of-squares pass brings it into cache and the scaling pass re-reads it
// from there.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rms_norm/kernel.cpp"
#include "ops/rms_norm/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/rms_norm/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::AccumulateDouble;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::ReadLanes;
using simd::ReadTail;
using simd::SumSquaresAndDot;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

template <typename T>
using ComputeOf = ComputeType<T>;

template <typename T>
void ForwardRows(const T* x, const T* weight, const T* bias, T* y, int64_t row_begin, int64_t row_end,
                 int64_t cols, double eps, bool stream) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double sum_squares = 0.0;
    SumSquaresAndDot<T>(xr, nullptr, nullptr, cols, &sum_squares, nullptr);
    const auto rstd =
        hn::Set(d, static_cast<C>(1.0 / std::sqrt(sum_squares / static_cast<double>(cols) + eps)));
    int64_t j = 0;
    // While this row is scaled from cache, the next row is fetched from
    // memory, so reads keep flowing during the write phase.
    const T* next = r + 1 < row_end ? xr + cols : xr;
    auto row_loop = [&](auto write) {
      if (bias != nullptr) {
        for (; j < full; j += lanes) {
          hwy::Prefetch(next + j);
          write(hn::MulAdd(hn::Mul(ReadLanes(d, xr + j), rstd), ReadLanes(d, weight + j),
                           ReadLanes(d, bias + j)),
                yr + j);
        }
      } else {
        for (; j < full; j += lanes) {
          hwy::Prefetch(next + j);
          write(hn::Mul(hn::Mul(ReadLanes(d, xr + j), rstd), ReadLanes(d, weight + j)), yr + j);
        }
      }
    };
    if (stream && AlignedFor(d, yr)) {
      row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
    } else {
      row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
    }
    if (j < cols) {
      const int64_t rest = cols - j;
      auto v =
          hn::Mul(hn::Mul(ReadTail(d, xr + j, rest, buffer), rstd), ReadTail(d, weight + j, rest, buffer));
      if (bias != nullptr) v = hn::Add(v, ReadTail(d, bias + j, rest, buffer));
      WriteTail(d, v, yr + j, rest, buffer);
    }
  }
  if (stream) hwy::FlushStream();
}

// Rows [row_begin, row_end): grad_x, and the rows' weight (and bias)
// gradient contributions added into the double partials pw (pb).
template <typename T>
void BackwardRows(const T* grad_y, const T* x, const T* weight, T* grad_x, double* pw, double* pb,
                  int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {
  using C = ComputeOf<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  alignas(64) C gxbuf[kMaxLanes] = {};
  const double inv_cols = 1.0 / static_cast<double>(cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * cols;
    const T* gr = grad_y + r * cols;
    T* dxr = grad_x + r * cols;
    double sum_squares = 0.0, dot = 0.0;  // dot = sum_j g_j * w_j * x_j
    SumSquaresAndDot<T>(xr, gr, weight, cols, &sum_squares, &dot);
    const double rstd = 1.0 / std::sqrt(sum_squares * inv_cols + eps);
    const auto rstd_v = hn::Set(d, static_cast<C>(rstd));
    const auto coef_v = hn::Set(d, static_cast<C>(rstd * rstd * rstd * dot * inv_cols));
    const bool stream_row = stream && AlignedFor(d, dxr);
    auto step = [&](const hn::VFromD<decltype(d)> g, const hn::VFromD<decltype(d)> xv,
                    const hn::VFromD<decltype(d)> w, int64_t j) {
      // dx = rstd * g * w - coef * x
      const auto dx = hn::NegMulAdd(coef_v, xv, hn::Mul(rstd_v, hn::Mul(g, w)));
      if (j + lanes <= cols) {
        if (stream_row) {
          WriteLanesStream(d, dx, dxr + j);
        } else {
          WriteLanes(d, dx, dxr + j);
        }
        AccumulateDouble(d, hn::Mul(hn::Mul(g, xv), rstd_v), pw + j);
        if (pb != nullptr) AccumulateDouble(d, g, pb + j);
      } else {
        const int64_t rest = cols - j;
        WriteTail(d, dx, dxr + j, rest, buffer);
        hn::StoreU(hn::Mul(hn::Mul(g, xv), rstd_v), d, gxbuf);
        for (int64_t k = 0; k < rest; ++k) pw[j + k] += static_cast<double>(gxbuf[k]);
        if (pb != nullptr) {
          hn::StoreU(g, d, gxbuf);
          for (int64_t k = 0; k < rest; ++k) pb[j + k] += static_cast<double>(gxbuf[k]);
        }
      }
    };
    int64_t j = 0;
    for (; j < full; j += lanes)
      step(ReadLanes(d, gr + j), ReadLanes(d, xr + j), ReadLanes(d, weight + j), j);
    if (j < cols) {
      const int64_t rest = cols - j;
      const auto g = ReadTail(d, gr + j, rest, buffer);
      const auto xv = ReadTail(d, xr + j, rest, buffer);
      const auto w = ReadTail(d, weight + j, rest, buffer);
      step(g, xv, w, j);
    }
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

#define OPBRIDGE_RMS_NORM_ENTRY_POINTS(T, Suffix)                                                            \
  void RmsNormForwardRows##Suffix(const T* x, const T* weight, const T* bias, T* y, int64_t row_begin,       \
                                  int64_t row_end, int64_t cols, double eps, bool stream) {                  \
    ForwardRows<T>(x, weight, bias, y, row_begin, row_end, cols, eps, stream);                               \
  }                                                                                                          \
  void RmsNormBackwardRows##Suffix(const T* grad_y, const T* x, const T* weight, T* grad_x, double* pw,      \
                                   double* pb, int64_t row_begin, int64_t row_end, int64_t cols, double eps, \
                                   bool stream) {                                                            \
    BackwardRows<T>(grad_y, x, weight, grad_x, pw, pb, row_begin, row_end, cols, eps, stream);               \
  }
OPBRIDGE_RMS_NORM_ENTRY_POINTS(float, F32)
OPBRIDGE_RMS_NORM_ENTRY_POINTS(double, F64)
OPBRIDGE_RMS_NORM_ENTRY_POINTS(Float16, F16)
OPBRIDGE_RMS_NORM_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_RMS_NORM_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(RmsNormForwardRowsF32);
HWY_EXPORT(RmsNormForwardRowsF64);
HWY_EXPORT(RmsNormForwardRowsF16);
HWY_EXPORT(RmsNormForwardRowsBF16);
HWY_EXPORT(RmsNormBackwardRowsF32);
HWY_EXPORT(RmsNormBackwardRowsF64);
HWY_EXPORT(RmsNormBackwardRowsF16);
HWY_EXPORT(RmsNormBackwardRowsBF16);

namespace {

template <typename T>
struct RowKernels;
#define OPBRIDGE_RMS_NORM_ROW_KERNELS(T, Suffix)                                                          \
  template <>                                                                                             \
  struct RowKernels<T> {                                                                                  \
    static void Forward(const T* x, const T* weight, const T* bias, T* y, int64_t row_begin,              \
                        int64_t row_end, int64_t cols, double eps, bool stream) {                         \
      OPBRIDGE_DYNAMIC_DISPATCH(RmsNormForwardRows##Suffix)                                               \
      (x, weight, bias, y, row_begin, row_end, cols, eps, stream);                                        \
    }                                                                                                     \
    static void Backward(const T* grad_y, const T* x, const T* weight, T* grad_x, double* pw, double* pb, \
                         int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {     \
      OPBRIDGE_DYNAMIC_DISPATCH(RmsNormBackwardRows##Suffix)                                              \
      (grad_y, x, weight, grad_x, pw, pb, row_begin, row_end, cols, eps, stream);                         \
    }                                                                                                     \
  };
OPBRIDGE_RMS_NORM_ROW_KERNELS(float, F32)
OPBRIDGE_RMS_NORM_ROW_KERNELS(double, F64)
OPBRIDGE_RMS_NORM_ROW_KERNELS(Float16, F16)
OPBRIDGE_RMS_NORM_ROW_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_RMS_NORM_ROW_KERNELS

}  // namespace

template <typename T>
void RmsNormForward(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t cols,
                    const RmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  const double eps = NormComputeEps<T>(attrs.eps);
  const bool stream = NormStreamsOutput<T>(rows * cols);
  DynamicFor(parallel_for, rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    RowKernels<T>::Forward(x, weight, bias, y, begin, end, cols, eps, stream);
  });
}

template <typename T>
void RmsNormBackward(const T* grad_y, const T* x, const T* weight, T* grad_x, T* grad_weight, T* grad_bias,
                     int64_t rows, int64_t cols, const RmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  const double eps = NormComputeEps<T>(attrs.eps);
  const bool stream = NormStreamsOutput<T>(rows * cols);
  NormBackwardChunks(rows, cols, grad_weight, grad_bias, parallel_for,
                     [=](double* pw, double* pb, int64_t row_begin, int64_t row_end) {
                       RowKernels<T>::Backward(grad_y, x, weight, grad_x, pw, pb, row_begin, row_end, cols,
                                               eps, stream);
                     });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                            \
  template void RmsNormForward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, const RmsNormAttrs&, \
                                  const ParallelFor&);                                                     \
  template void RmsNormBackward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,             \
                                   const RmsNormAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
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
