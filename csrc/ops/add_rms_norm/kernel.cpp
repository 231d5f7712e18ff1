// add_rms_norm kernels, vectorized with Highway: compiled once per SIMD
// target (foreach_target re-includes this file) and dispatched at run time.
// Each row of x and residual is read from memory once: the first pass adds
// them, writes residual_out and sums its squares; the second pass adds them
// again from cache and writes the normalized output, so both outputs can be
// written with non-temporal stores.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/add_rms_norm/kernel.cpp"
#include "ops/add_rms_norm/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/norm_launch.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/add_rms_norm/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::AccumulateDouble;
using simd::AccumulateDoubleTail;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::kSumBlock;
using simd::ReadLanes;
using simd::ReadTail;
using simd::RoundTrip;
using simd::SumSquaresAndDot;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

template <typename T>
void ForwardRows(const T* x, const T* residual, const T* weight, const T* bias, T* out, T* residual_out,
                 int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  // x + residual as T holds it (an unfused add rounds it to T).
  const auto sum = [d](hn::VFromD<decltype(d)> a, hn::VFromD<decltype(d)> b) {
    return RoundTrip<T>(d, hn::Add(a, b));
  };
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * cols;
    const T* rr = residual + r * cols;
    T* sr = residual_out + r * cols;
    T* yr = out + r * cols;

    // Pass 1: residual_out and the sum of its squares (float lanes, moved
    // to double every kSumBlock elements).
    double sum_squares = 0.0;
    {
      int64_t j = 0;
      auto pass = [&](auto write) {
        while (j < full) {
          const int64_t block_end = std::min(full, j + kSumBlock);
          auto acc = hn::Zero(d);
          for (; j < block_end; j += lanes) {
            const auto s = sum(ReadLanes(d, xr + j), ReadLanes(d, rr + j));
            write(s, sr + j);
            acc = hn::MulAdd(s, s, acc);
          }
          sum_squares += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, acc)));
        }
      };
      if (stream && AlignedFor(d, sr)) {
        pass([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
      } else {
        pass([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
      }
      if (j < cols) {
        const int64_t rest = cols - j;
        const auto s = sum(ReadTail(d, xr + j, rest, buffer), ReadTail(d, rr + j, rest, buffer));
        WriteTail(d, s, sr + j, rest, buffer);
        sum_squares += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Mul(s, s))));
      }
      if constexpr (!std::is_same_v<C, double>) {
        // Squares past float32's range: the row (as residual_out holds it) in double.
        if (!std::isfinite(sum_squares)) {
          if (stream) hwy::FlushStream();
          sum_squares = simd::SumSquaresInDouble(sr, cols);
        }
      }
    }

    // Pass 2: out from x and residual, now in cache, while the next rows
    // are fetched from memory.
    const auto rstd =
        hn::Set(d, static_cast<C>(1.0 / std::sqrt(sum_squares / static_cast<double>(cols) + eps)));
    const T* next_x = r + 1 < row_end ? xr + cols : xr;
    const T* next_r = r + 1 < row_end ? rr + cols : rr;
    int64_t j = 0;
    auto pass = [&](auto write) {
      if (bias != nullptr) {
        for (; j < full; j += lanes) {
          hwy::Prefetch(next_x + j);
          hwy::Prefetch(next_r + j);
          const auto s = sum(ReadLanes(d, xr + j), ReadLanes(d, rr + j));
          write(hn::MulAdd(hn::Mul(s, rstd), ReadLanes(d, weight + j), ReadLanes(d, bias + j)), yr + j);
        }
      } else {
        for (; j < full; j += lanes) {
          hwy::Prefetch(next_x + j);
          hwy::Prefetch(next_r + j);
          const auto s = sum(ReadLanes(d, xr + j), ReadLanes(d, rr + j));
          write(hn::Mul(hn::Mul(s, rstd), ReadLanes(d, weight + j)), yr + j);
        }
      }
    };
    if (stream && AlignedFor(d, yr)) {
      pass([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
    } else {
      pass([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
    }
    if (j < cols) {
      const int64_t rest = cols - j;
      const auto s = sum(ReadTail(d, xr + j, rest, buffer), ReadTail(d, rr + j, rest, buffer));
      auto v = hn::Mul(hn::Mul(s, rstd), ReadTail(d, weight + j, rest, buffer));
      if (bias != nullptr) v = hn::Add(v, ReadTail(d, bias + j, rest, buffer));
      WriteTail(d, v, yr + j, rest, buffer);
    }
  }
  if (stream) hwy::FlushStream();
}

// Rows [row_begin, row_end): grad_sum, and the rows' weight (and bias)
// gradient contributions added into the double partials pw (pb). As
// rms_norm's backward on s = residual_out, plus grad_residual_out.
template <typename T>
void BackwardRows(const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight,
                  T* grad_sum, double* pw, double* pb, int64_t row_begin, int64_t row_end, int64_t cols,
                  double eps, bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  const double inv_cols = 1.0 / static_cast<double>(cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* sr = residual_out + r * cols;
    const T* gr = grad_out + r * cols;
    const T* grr = grad_residual_out != nullptr ? grad_residual_out + r * cols : nullptr;
    T* dsr = grad_sum + r * cols;
    double sum_squares = 0.0, dot = 0.0;  // dot = sum_j g_j * w_j * s_j
    SumSquaresAndDot<T>(sr, gr, weight, cols, &sum_squares, &dot);
    const double rstd = 1.0 / std::sqrt(sum_squares * inv_cols + eps);
    const auto rstd_v = hn::Set(d, static_cast<C>(rstd));
    const auto coef_v = hn::Set(d, static_cast<C>(rstd * rstd * rstd * dot * inv_cols));
    const bool stream_row = stream && AlignedFor(d, dsr);
    // ds = rstd * g * w - coef * s (+ grad_residual_out)
    auto step = [&](const hn::VFromD<decltype(d)> g, const hn::VFromD<decltype(d)> s,
                    const hn::VFromD<decltype(d)> w, const hn::VFromD<decltype(d)> gres, int64_t j) {
      const auto ds = hn::Add(hn::NegMulAdd(coef_v, s, hn::Mul(rstd_v, hn::Mul(g, w))), gres);
      const auto gw = hn::Mul(hn::Mul(g, s), rstd_v);
      if (j + lanes <= cols) {
        if (stream_row) {
          WriteLanesStream(d, ds, dsr + j);
        } else {
          WriteLanes(d, ds, dsr + j);
        }
        AccumulateDouble(d, gw, pw + j);
        if (pb != nullptr) AccumulateDouble(d, g, pb + j);
      } else {
        const int64_t rest = cols - j;
        WriteTail(d, ds, dsr + j, rest, buffer);
        AccumulateDoubleTail(d, gw, pw + j, rest);
        if (pb != nullptr) AccumulateDoubleTail(d, g, pb + j, rest);
      }
    };
    int64_t j = 0;
    if (grr != nullptr) {
      for (; j < full; j += lanes) {
        step(ReadLanes(d, gr + j), ReadLanes(d, sr + j), ReadLanes(d, weight + j), ReadLanes(d, grr + j), j);
      }
    } else {
      for (; j < full; j += lanes)
        step(ReadLanes(d, gr + j), ReadLanes(d, sr + j), ReadLanes(d, weight + j), hn::Zero(d), j);
    }
    if (j < cols) {
      const int64_t rest = cols - j;
      const auto g = ReadTail(d, gr + j, rest, buffer);
      const auto s = ReadTail(d, sr + j, rest, buffer);
      const auto w = ReadTail(d, weight + j, rest, buffer);
      const auto gres = grr != nullptr ? ReadTail(d, grr + j, rest, buffer) : hn::Zero(d);
      step(g, s, w, gres, j);
    }
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

#define OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS(T, Suffix)                                                        \
  void AddRmsNormForwardRows##Suffix(const T* x, const T* residual, const T* weight, const T* bias, T* out,  \
                                     T* residual_out, int64_t row_begin, int64_t row_end, int64_t cols,      \
                                     double eps, bool stream) {                                              \
    ForwardRows<T>(x, residual, weight, bias, out, residual_out, row_begin, row_end, cols, eps, stream);     \
  }                                                                                                          \
  void AddRmsNormBackwardRows##Suffix(                                                                       \
      const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight, T* grad_sum,    \
      double* pw, double* pb, int64_t row_begin, int64_t row_end, int64_t cols, double eps, bool stream) {   \
    BackwardRows<T>(grad_out, grad_residual_out, residual_out, weight, grad_sum, pw, pb, row_begin, row_end, \
                    cols, eps, stream);                                                                      \
  }
OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS(float, F32)
OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS(double, F64)
OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS(Float16, F16)
OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_ADD_RMS_NORM_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(AddRmsNormForwardRowsF32);
HWY_EXPORT(AddRmsNormForwardRowsF64);
HWY_EXPORT(AddRmsNormForwardRowsF16);
HWY_EXPORT(AddRmsNormForwardRowsBF16);
HWY_EXPORT(AddRmsNormBackwardRowsF32);
HWY_EXPORT(AddRmsNormBackwardRowsF64);
HWY_EXPORT(AddRmsNormBackwardRowsF16);
HWY_EXPORT(AddRmsNormBackwardRowsBF16);

namespace {

template <typename T>
struct RowKernels;
#define OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS(T, Suffix)                                                       \
  template <>                                                                                              \
  struct RowKernels<T> {                                                                                   \
    static void Forward(const T* x, const T* residual, const T* weight, const T* bias, T* out,             \
                        T* residual_out, int64_t row_begin, int64_t row_end, int64_t cols, double eps,     \
                        bool stream) {                                                                     \
      OPBRIDGE_DYNAMIC_DISPATCH(AddRmsNormForwardRows##Suffix)                                             \
      (x, residual, weight, bias, out, residual_out, row_begin, row_end, cols, eps, stream);               \
    }                                                                                                      \
    static void Backward(const T* grad_out, const T* grad_residual_out, const T* residual_out,             \
                         const T* weight, T* grad_sum, double* pw, double* pb, int64_t row_begin,          \
                         int64_t row_end, int64_t cols, double eps, bool stream) {                         \
      OPBRIDGE_DYNAMIC_DISPATCH(AddRmsNormBackwardRows##Suffix)                                            \
      (grad_out, grad_residual_out, residual_out, weight, grad_sum, pw, pb, row_begin, row_end, cols, eps, \
       stream);                                                                                            \
    }                                                                                                      \
  };
OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS(float, F32)
OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS(double, F64)
OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS(Float16, F16)
OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_ADD_RMS_NORM_ROW_KERNELS

}  // namespace

template <typename T>
void AddRmsNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out, T* residual_out,
                       int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                       const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  const double eps = NormComputeEps<T>(attrs.eps);
  // Two outputs: together they decide whether to bypass the cache.
  const bool stream = NormStreamsOutput<T>(2 * rows * cols);
  DynamicFor(parallel_for, rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    RowKernels<T>::Forward(x, residual, weight, bias, out, residual_out, begin, end, cols, eps, stream);
  });
}

template <typename T>
void AddRmsNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight,
                        T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                        const AddRmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  const double eps = NormComputeEps<T>(attrs.eps);
  const bool stream = NormStreamsOutput<T>(rows * cols);
  NormBackwardChunks(rows, cols, grad_weight, grad_bias, parallel_for,
                     [=](double* pw, double* pb, int64_t row_begin, int64_t row_end) {
                       RowKernels<T>::Backward(grad_out, grad_residual_out, residual_out, weight, grad_sum,
                                               pw, pb, row_begin, row_end, cols, eps, stream);
                     });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                             \
  template void AddRmsNormForward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,      \
                                     const AddRmsNormAttrs&, const ParallelFor&);                           \
  template void AddRmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                      const AddRmsNormAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

Status LaunchAddRmsNorm(const KernelArgs& args) {
  return DispatchNormForward<NormResidual::kAdded>(kAddRmsNormSpec, args, [&](const auto& t) {
    AddRmsNormForward(t.x, t.residual, t.weight, t.bias, t.y, t.sum, t.rows, t.cols, AddRmsNormAttrs{t.eps},
                      args.parallel_for);
  });
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight;
// outputs: the gradient of x + residual, grad_weight, grad_bias (or null).
Status LaunchAddRmsNormBackward(const KernelArgs& args) {
  return DispatchNormBackward<NormResidual::kAdded>(kAddRmsNormSpec, "x", args, [&](const auto& t) {
    AddRmsNormBackward(t.grad_y, t.grad_sum, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias, t.rows,
                       t.cols, AddRmsNormAttrs{t.eps}, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
