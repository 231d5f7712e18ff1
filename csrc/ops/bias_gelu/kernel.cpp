// bias_gelu kernels, vectorized with Highway: compiled once per SIMD target
// (foreach_target re-includes this file) and dispatched at run time. float32,
// float16 and bfloat16 compute in float32 lanes with a rational erf and
// Highway's exp (the tanh form as a sigmoid; a few ulp); float64 keeps
// std::erf, std::tanh and std::exp. One pass over memory in each direction.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/bias_gelu/kernel.cpp"
#include "ops/bias_gelu/kernel.h"

// clang-format off
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>  // after highway.h
// clang-format on

#include <algorithm>
#include <cmath>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/column_sums.h"
#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/bias_gelu/spec.h"

#ifndef OPBRIDGE_BIAS_GELU_CONSTANTS_
#define OPBRIDGE_BIAS_GELU_CONSTANTS_
namespace opbridge {
namespace gelu {
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;
// erf(x) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p x), x >= 0
// (Abramowitz and Stegun, Handbook of Mathematical Functions, 7.1.26).
constexpr double kErfcP = 0.3275911;
constexpr double kErfcA[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};
// Rows whose bias-gradient contributions are summed in float lanes before
// they are added into the double partial sums.
constexpr int64_t kFloatSumRows = 8;
// Floats past the last column in the row-sum scratch: a whole vector of the
// widest target.
constexpr int64_t kRowSumsPadding = 64;
}  // namespace gelu
}  // namespace opbridge
#endif

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::AccumulateDouble;
using simd::AccumulateDoubleTail;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::ReadLanes;
using simd::ReadTail;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

// float32 erf as a rational approximation p(x) / q(x) on a clamped argument
// (the coefficients Eigen's generic_fast_erf_float uses; a few ulp). A NaN input stays NaN: every
// caller multiplies the result by the input.
template <class D, class V>
HWY_INLINE V RationalErf(D d, V x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
  const V x2 = hn::Mul(x, x);
  V p = hn::MulAdd(x2, hn::Set(d, -2.72614225801306e-10f), hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(x2, p, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(x2, p, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(x2, p, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(x2, p, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(x2, p, hn::Set(d, -1.60960333262415e-02f));
  p = hn::Mul(x, p);
  V q = hn::MulAdd(x2, hn::Set(d, -1.45660718464996e-05f), hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(x2, q, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(x2, q, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(x2, q, hn::Set(d, -1.42647390514189e-02f));
  return hn::Div(p, q);
}

// tanh's argument sqrt(2 / pi) (v + 0.044715 v^3).
template <class D, class V>
HWY_INLINE V TanhArgument(D d, V v) {
  const V v2 = hn::Mul(v, v);
  const V inner = hn::MulAdd(hn::Mul(hn::Set(d, static_cast<float>(gelu::kTanhCubic)), v2), v, v);
  return hn::Mul(hn::Set(d, static_cast<float>(gelu::kSqrt2OverPi)), inner);
}

// The tanh form through 1 + tanh(u) = 2 sigmoid(2 u): e = exp(-2 u), and
// 0.5 v (1 + tanh(u)) = v / (1 + e). Written as 1 + tanh(u) it cancels where
// tanh(u) is close to -1 (a large negative v): the rational tanh stops short
// of -1 there, and left 0.5 v (1 + t) at -1.19e-5 for v = -100, where the
// exact value (and PyTorch's) is 0. Beyond kExpMax, e overflows: the value is
// v * 0 (and its derivative 0), as it is in exact arithmetic at float32.
template <class D, class V>
HWY_INLINE V SigmoidExp(D d, V v, V* beyond) {
  const V minus_2u = hn::Mul(hn::Set(d, -2.0f), TanhArgument(d, v));
  const V exp_max = hn::Set(d, 88.0f);  // Highway's Exp is valid on [-FLT_MAX, 88]
  *beyond = hn::VecFromMask(d, hn::Gt(minus_2u, exp_max));
  return hn::Exp(d, hn::Min(hn::Max(minus_2u, hn::Set(d, -88.0f)), exp_max));
}

// 0.5 v (1 + erf(v / sqrt(2))), or for tanh v / (1 + exp(-2 u)) (see SigmoidExp).
template <bool kTanh, class D, class V>
HWY_INLINE V Gelu(D d, V v) {
  if constexpr (kTanh) {
    V beyond;
    const V e = SigmoidExp(d, v, &beyond);
    const V y = hn::Div(v, hn::Add(hn::Set(d, 1.0f), e));
    return hn::IfThenElse(hn::MaskFromVec(beyond), hn::Mul(v, hn::Zero(d)), y);
  } else {
    const V half_v = hn::Mul(hn::Set(d, 0.5f), v);
    const V t = RationalErf(d, hn::Mul(v, hn::Set(d, static_cast<float>(gelu::kInvSqrt2))));
    return hn::MulAdd(half_v, t, half_v);
  }
}

// d gelu / dv: cdf + v pdf for erf; for tanh, with s = sigmoid(2 u) =
// 1 / (1 + exp(-2 u)) (no cancellation, see SigmoidExp):
// s + 2 v s (1 - s) sqrt(2 / pi) (1 + 3 * 0.044715 v^2).
template <bool kTanh, class D, class V>
HWY_INLINE V GeluGrad(D d, V v) {
  const V half = hn::Set(d, 0.5f);
  if constexpr (kTanh) {
    const V one = hn::Set(d, 1.0f);
    V beyond;
    const V e = SigmoidExp(d, v, &beyond);
    const V s = hn::Div(one, hn::Add(one, e));
    const V slope = hn::MulAdd(hn::Set(d, static_cast<float>(3.0 * gelu::kTanhCubic)), hn::Mul(v, v), one);
    const V ds = hn::Mul(hn::Mul(hn::Set(d, static_cast<float>(2.0 * gelu::kSqrt2OverPi)), slope),
                         hn::Mul(s, hn::Sub(one, s)));
    return hn::IfThenZeroElse(hn::MaskFromVec(beyond), hn::MulAdd(v, ds, s));
  } else {
    // One exp serves both terms: e = exp(-v^2 / 2) gives pdf = e / sqrt(2 pi)
    // and, by Abramowitz and Stegun 7.1.26, 0.5 erfc(|v| / sqrt(2)) =
    // 0.5 t P(t) e with t = 1 / (1 + p |v| / sqrt(2)) (|error| <= 1.5e-7 in
    // erf; the gradient is within 3.2e-7 of float64, as PyTorch's own float
    // gelu_backward is within 2.8e-7).
    const V one = hn::Set(d, 1.0f);
    const V e = hn::Exp(d, hn::Mul(hn::Neg(half), hn::Mul(v, v)));
    const V t = hn::Div(
        one, hn::MulAdd(hn::Set(d, static_cast<float>(gelu::kErfcP * gelu::kInvSqrt2)), hn::Abs(v), one));
    V poly = hn::MulAdd(t, hn::Set(d, static_cast<float>(gelu::kErfcA[4])),
                        hn::Set(d, static_cast<float>(gelu::kErfcA[3])));
    poly = hn::MulAdd(t, poly, hn::Set(d, static_cast<float>(gelu::kErfcA[2])));
    poly = hn::MulAdd(t, poly, hn::Set(d, static_cast<float>(gelu::kErfcA[1])));
    poly = hn::MulAdd(t, poly, hn::Set(d, static_cast<float>(gelu::kErfcA[0])));
    const V tail = hn::Mul(hn::Mul(half, hn::Mul(t, poly)), e);  // 0.5 erfc(|v| / sqrt(2))
    const V cdf = hn::IfThenElse(hn::Lt(v, hn::Zero(d)), tail, hn::Sub(one, tail));
    return hn::MulAdd(hn::Mul(v, hn::Set(d, static_cast<float>(gelu::kInvSqrt2Pi))), e, cdf);
  }
}

template <typename T, bool kTanh>
void ForwardRowsImpl(const T* x, const T* bias, T* y, int64_t row_begin, int64_t row_end, int64_t cols,
                     bool stream) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    int64_t j = 0;
    auto row_loop = [&](auto write) {
      for (; j < full; j += lanes)
        write(Gelu<kTanh>(d, hn::Add(ReadLanes(d, xr + j), ReadLanes(d, bias + j))), yr + j);
    };
    if (stream && AlignedFor(d, yr)) {
      row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
    } else {
      row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
    }
    if (j < cols) {
      const int64_t rest = cols - j;
      const auto v = hn::Add(ReadTail(d, xr + j, rest, buffer), ReadTail(d, bias + j, rest, buffer));
      WriteTail(d, Gelu<kTanh>(d, v), yr + j, rest, buffer);
    }
  }
  if (stream) hwy::FlushStream();
}

// Rows [row_begin, row_end): grad_x, and (pb not null) the rows' bias
// gradient added into the double partials pb. `sums` is scratch for cols
// floats: contributions of kFloatSumRows rows at a time are summed there,
// in row order, before they move to double.
template <typename T, bool kTanh>
void BackwardRowsImpl(const T* grad_y, const T* x, const T* bias, T* grad_x, double* pb, float* sums,
                      int64_t row_begin, int64_t row_end, int64_t cols, bool stream) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = cols - cols % lanes;
  alignas(64) T buffer[kMaxLanes];
  for (int64_t block = row_begin; block < row_end; block += gelu::kFloatSumRows) {
    const int64_t block_end = std::min(row_end, block + gelu::kFloatSumRows);
    for (int64_t r = block; r < block_end; ++r) {
      const T* xr = x + r * cols;
      const T* gr = grad_y + r * cols;
      T* dxr = grad_x + r * cols;
      const bool first = r == block;
      int64_t j = 0;
      auto row_loop = [&](auto write) {
        for (; j < full; j += lanes) {
          const auto v = hn::Add(ReadLanes(d, xr + j), ReadLanes(d, bias + j));
          const auto dx = hn::Mul(ReadLanes(d, gr + j), GeluGrad<kTanh>(d, v));
          write(dx, dxr + j);
          if (pb != nullptr) {
            hn::StoreU(first ? dx : hn::Add(hn::LoadU(d, sums + j), dx), d, sums + j);
          }
        }
      };
      if (stream && AlignedFor(d, dxr)) {
        row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
      } else {
        row_loop([d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
      }
      if (j < cols) {
        const int64_t rest = cols - j;
        const auto v = hn::Add(ReadTail(d, xr + j, rest, buffer), ReadTail(d, bias + j, rest, buffer));
        const auto dx = hn::Mul(ReadTail(d, gr + j, rest, buffer), GeluGrad<kTanh>(d, v));
        WriteTail(d, dx, dxr + j, rest, buffer);
        if (pb != nullptr) {
          // sums has room for a whole vector past `full` (see the caller).
          hn::StoreU(first ? dx : hn::Add(hn::LoadU(d, sums + j), dx), d, sums + j);
        }
      }
    }
    if (pb != nullptr) {
      int64_t j = 0;
      for (; j < full; j += lanes) AccumulateDouble(d, hn::LoadU(d, sums + j), pb + j);
      if (j < cols) AccumulateDoubleTail(d, hn::LoadU(d, sums + j), pb + j, cols - j);
    }
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

#define OPBRIDGE_BIAS_GELU_ENTRY_POINTS(T, Suffix)                                                      \
  void BiasGeluForwardRows##Suffix(const T* x, const T* bias, T* y, int64_t row_begin, int64_t row_end, \
                                   int64_t cols, bool use_tanh, bool stream) {                          \
    if (use_tanh) {                                                                                     \
      ForwardRowsImpl<T, true>(x, bias, y, row_begin, row_end, cols, stream);                           \
    } else {                                                                                            \
      ForwardRowsImpl<T, false>(x, bias, y, row_begin, row_end, cols, stream);                          \
    }                                                                                                   \
  }                                                                                                     \
  void BiasGeluBackwardRows##Suffix(const T* grad_y, const T* x, const T* bias, T* grad_x, double* pb,  \
                                    float* sums, int64_t row_begin, int64_t row_end, int64_t cols,      \
                                    bool use_tanh, bool stream) {                                       \
    if (use_tanh) {                                                                                     \
      BackwardRowsImpl<T, true>(grad_y, x, bias, grad_x, pb, sums, row_begin, row_end, cols, stream);   \
    } else {                                                                                            \
      BackwardRowsImpl<T, false>(grad_y, x, bias, grad_x, pb, sums, row_begin, row_end, cols, stream);  \
    }                                                                                                   \
  }
OPBRIDGE_BIAS_GELU_ENTRY_POINTS(float, F32)
OPBRIDGE_BIAS_GELU_ENTRY_POINTS(Float16, F16)
OPBRIDGE_BIAS_GELU_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_BIAS_GELU_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(BiasGeluForwardRowsF32);
HWY_EXPORT(BiasGeluForwardRowsF16);
HWY_EXPORT(BiasGeluForwardRowsBF16);
HWY_EXPORT(BiasGeluBackwardRowsF32);
HWY_EXPORT(BiasGeluBackwardRowsF16);
HWY_EXPORT(BiasGeluBackwardRowsBF16);

namespace {

// float64: libm's erf, tanh and exp, one element at a time.
double GeluOf(double v, bool use_tanh) {
  if (use_tanh) {
    const double inner = gelu::kSqrt2OverPi * (v + gelu::kTanhCubic * v * v * v);
    return 0.5 * v * (1.0 + std::tanh(inner));
  }
  return 0.5 * v * (1.0 + std::erf(v * gelu::kInvSqrt2));
}

double GeluGradOf(double v, bool use_tanh) {
  if (use_tanh) {
    const double t = std::tanh(gelu::kSqrt2OverPi * (v + gelu::kTanhCubic * v * v * v));
    return 0.5 * (1.0 + t) +
           0.5 * v * (1.0 - t * t) * gelu::kSqrt2OverPi * (1.0 + 3.0 * gelu::kTanhCubic * v * v);
  }
  const double cdf = 0.5 * (1.0 + std::erf(v * gelu::kInvSqrt2));
  return cdf + v * gelu::kInvSqrt2Pi * std::exp(-0.5 * v * v);
}

template <typename T>
struct RowKernels;
#define OPBRIDGE_BIAS_GELU_ROW_KERNELS(T, Suffix)                                                          \
  template <>                                                                                              \
  struct RowKernels<T> {                                                                                   \
    static void Forward(const T* x, const T* bias, T* y, int64_t row_begin, int64_t row_end, int64_t cols, \
                        bool use_tanh, bool stream) {                                                      \
      OPBRIDGE_DYNAMIC_DISPATCH(BiasGeluForwardRows##Suffix)                                               \
      (x, bias, y, row_begin, row_end, cols, use_tanh, stream);                                            \
    }                                                                                                      \
    static void Backward(const T* grad_y, const T* x, const T* bias, T* grad_x, double* pb, float* sums,   \
                         int64_t row_begin, int64_t row_end, int64_t cols, bool use_tanh, bool stream) {   \
      OPBRIDGE_DYNAMIC_DISPATCH(BiasGeluBackwardRows##Suffix)                                              \
      (grad_y, x, bias, grad_x, pb, sums, row_begin, row_end, cols, use_tanh, stream);                     \
    }                                                                                                      \
  };
OPBRIDGE_BIAS_GELU_ROW_KERNELS(float, F32)
OPBRIDGE_BIAS_GELU_ROW_KERNELS(Float16, F16)
OPBRIDGE_BIAS_GELU_ROW_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_BIAS_GELU_ROW_KERNELS

template <>
struct RowKernels<double> {
  static void Forward(const double* x, const double* bias, double* y, int64_t row_begin, int64_t row_end,
                      int64_t cols, bool use_tanh, bool /*stream*/) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = GeluOf(x[r * cols + j] + bias[j], use_tanh);
    }
  }
  static void Backward(const double* grad_y, const double* x, const double* bias, double* grad_x, double* pb,
                       float* /*sums*/, int64_t row_begin, int64_t row_end, int64_t cols, bool use_tanh,
                       bool /*stream*/) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t i = r * cols + j;
        const double dx = grad_y[i] * GeluGradOf(x[i] + bias[j], use_tanh);
        grad_x[i] = dx;
        if (pb != nullptr) pb[j] += dx;
      }
    }
  }
};

// An output that does not fit in the last-level cache is written with
// non-temporal stores (float32 outputs only).
template <typename T>
bool OutputStreams(int64_t elements) {
  return elements * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
}

}  // namespace

template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  const bool use_tanh = attrs.use_tanh;
  const bool stream = OutputStreams<T>(rows * cols);
  DynamicFor(parallel_for, rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    RowKernels<T>::Forward(x, bias, y, begin, end, cols, use_tanh, stream);
  });
}

template <typename T>
void BiasGeluBackward(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                      int64_t cols, const BiasGeluAttrs& attrs, const ParallelFor& parallel_for) {
  if (cols <= 0) return;
  if (rows <= 0) {
    if (grad_bias != nullptr) std::fill(grad_bias, grad_bias + cols, FromFloat<T>(0.0f));
    return;
  }
  const bool use_tanh = attrs.use_tanh;
  const bool want_bias = grad_bias != nullptr;
  const bool stream = OutputStreams<T>(rows * cols);
  // The bias gradient: partial sums over a fixed, shape-determined split of
  // the rows, identical whatever the parallelism.
  ChunkedColumnSums sums(rows, cols, 1);
  ChunkedColumnSums* partials = &sums;
  DynamicFor(parallel_for, sums.chunks(), 1, [=](int64_t chunk_begin, int64_t chunk_end) {
    // Float row sums, with room for a whole vector past the last column.
    std::vector<float> row_sums(want_bias ? static_cast<size_t>(cols + gelu::kRowSumsPadding) : 0);
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      RowKernels<T>::Backward(grad_y, x, bias, grad_x, want_bias ? partials->Partial(0, chunk) : nullptr,
                              row_sums.data(), partials->RowBegin(chunk), partials->RowEnd(chunk), cols,
                              use_tanh, stream);
    }
  });
  if (want_bias) sums.Total(0, grad_bias, FromDouble<T>);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                    \
  template void BiasGeluForward<T>(const T*, const T*, T*, int64_t, int64_t, const BiasGeluAttrs&, \
                                   const ParallelFor&);                                            \
  template void BiasGeluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,        \
                                    const BiasGeluAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
OPBRIDGE_INSTANTIATE(Float16)
OPBRIDGE_INSTANTIATE(BFloat16)
#undef OPBRIDGE_INSTANTIATE

Status LaunchBiasGelu(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  return DispatchFloatingOrHalf(kBiasGeluSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    BiasGeluForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                       static_cast<T*>(args.outputs[0]), rows, cols, attrs, args.parallel_for);
  });
}

// Backward inputs: grad_y, x, bias; outputs: grad_x, grad_bias (or null).
Status LaunchBiasGeluBackward(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Shape& x_shape = args.input_infos[1].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  return DispatchFloatingOrHalf(kBiasGeluSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    BiasGeluBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                        static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]),
                        static_cast<T*>(args.outputs[1]), rows, cols, attrs, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
