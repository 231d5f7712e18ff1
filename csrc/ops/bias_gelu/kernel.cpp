#include "ops/bias_gelu/kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "opbridge/checks.h"
#include "ops/bias_gelu/spec.h"

// The clamps in FastErf / FastTanh are compares; GCC turns them into vector
// selects only when it may assume compares do not trap. No result changes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

namespace opbridge {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;

// float32 erf and tanh as rational approximations (Eigen's
// generic_fast_erf_float / generic_fast_tanh_float, a few ulp): plain
// arithmetic, so the row loops vectorize, where libm's erff/tanhf would be
// called one element at a time. float64 keeps std::erf / std::tanh.
inline float FastErf(float x) {
  // Ternaries (not std::min/max) if-convert into vector selects; NaN passes.
  x = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  const float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  p = x * p;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return p / q;
}

inline float FastTanh(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  x = x < -kClamp ? -kClamp : (x > kClamp ? kClamp : x);
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  p = x * p;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return p / q;
}

inline float Erf(float x) { return FastErf(x); }
inline double Erf(double x) { return std::erf(x); }
inline float Tanh(float x) { return FastTanh(x); }
inline double Tanh(double x) { return std::tanh(x); }

template <typename T>
T GeluErf(T v) {
  return T(0.5) * v * (T(1) + Erf(v * static_cast<T>(kInvSqrt2)));
}

template <typename T>
T GeluTanh(T v) {
  const T inner = static_cast<T>(kSqrt2OverPi) * (v + static_cast<T>(kTanhCubic) * v * v * v);
  return T(0.5) * v * (T(1) + Tanh(inner));
}

template <typename T>
T GeluErfGrad(T v) {
  const T cdf = T(0.5) * (T(1) + Erf(v * static_cast<T>(kInvSqrt2)));
  const T pdf = static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
  return cdf + v * pdf;
}

template <typename T>
T GeluTanhGrad(T v) {
  const T k = static_cast<T>(kSqrt2OverPi);
  const T c = static_cast<T>(kTanhCubic);
  const T t = Tanh(k * (v + c * v * v * v));
  return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
}

template <typename T, T (*Fn)(T)>
void MapRows(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const ParallelFor& parallel_for) {
  parallel_for(rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) yr[j] = Fn(xr[j] + bias[j]);
    }
  });
}

}  // namespace

template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  if (attrs.use_tanh) {
    MapRows<T, GeluTanh<T>>(x, bias, y, rows, cols, parallel_for);
  } else {
    MapRows<T, GeluErf<T>>(x, bias, y, rows, cols, parallel_for);
  }
}

template <typename T>
void BiasGeluBackward(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                      int64_t cols, const BiasGeluAttrs& attrs, const ParallelFor& parallel_for) {
  if (cols <= 0) return;
  if (rows <= 0) {
    if (grad_bias != nullptr) std::fill(grad_bias, grad_bias + cols, T(0));
    return;
  }
  const bool use_tanh = attrs.use_tanh;
  // A fixed number of row chunks (a function of the shape, not of the thread
  // count), each with its own partial bias sums.
  const int64_t chunk_rows = std::max<int64_t>(RowGrain(cols), (rows + 63) / 64);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const bool want_bias = grad_bias != nullptr;
  std::vector<double> partial_bias(want_bias ? static_cast<size_t>(chunks * cols) : 0, 0.0);
  double* pb_all = partial_bias.data();
  parallel_for(chunks, 1, [=](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      double* pb = want_bias ? pb_all + chunk * cols : nullptr;
      const int64_t row_end = std::min(rows, (chunk + 1) * chunk_rows);
      for (int64_t r = chunk * chunk_rows; r < row_end; ++r) {
        const T* xr = x + r * cols;
        const T* gr = grad_y + r * cols;
        T* dxr = grad_x + r * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const T v = xr[j] + bias[j];
          const T d = gr[j] * (use_tanh ? GeluTanhGrad(v) : GeluErfGrad(v));
          dxr[j] = d;
          if (pb != nullptr) pb[j] += static_cast<double>(d);
        }
      }
    }
  });
  if (!want_bias) return;
  for (int64_t j = 0; j < cols; ++j) {
    double sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += pb_all[chunk * cols + j];
    grad_bias[j] = static_cast<T>(sum);
  }
}

#define OPBRIDGE_INSTANTIATE(T)                                                                    \
  template void BiasGeluForward<T>(const T*, const T*, T*, int64_t, int64_t, const BiasGeluAttrs&, \
                                   const ParallelFor&);                                            \
  template void BiasGeluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,        \
                                    const BiasGeluAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
#undef OPBRIDGE_INSTANTIATE

Status LaunchBiasGelu(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  return DispatchFloating(kBiasGeluSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
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
  return DispatchFloating(kBiasGeluSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    BiasGeluBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                        static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]),
                        static_cast<T*>(args.outputs[1]), rows, cols, attrs, args.parallel_for);
  });
}

}  // namespace opbridge
