#include "ops/bias_gelu/kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/checks.h"
#include "ops/bias_gelu/spec.h"

namespace opbridge {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;

template <typename T>
T GeluErf(T v) {
  return T(0.5) * v * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
}

template <typename T>
T GeluTanh(T v) {
  const T inner = static_cast<T>(kSqrt2OverPi) * (v + static_cast<T>(kTanhCubic) * v * v * v);
  return T(0.5) * v * (T(1) + std::tanh(inner));
}

template <typename T>
T GeluErfGrad(T v) {
  const T cdf = T(0.5) * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
  const T pdf = static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
  return cdf + v * pdf;
}

template <typename T>
T GeluTanhGrad(T v) {
  const T k = static_cast<T>(kSqrt2OverPi);
  const T c = static_cast<T>(kTanhCubic);
  const T t = std::tanh(k * (v + c * v * v * v));
  return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
}

template <typename T, typename Fn>
void MapRows(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const ParallelFor& parallel_for,
             Fn fn) {
  parallel_for(rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) yr[j] = fn(xr[j] + bias[j]);
    }
  });
}

}  // namespace

template <typename T>
void BiasGeluForward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const BiasGeluAttrs& attrs,
                     const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  if (attrs.use_tanh) {
    MapRows(x, bias, y, rows, cols, parallel_for, GeluTanh<T>);
  } else {
    MapRows(x, bias, y, rows, cols, parallel_for, GeluErf<T>);
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

}  // namespace opbridge
