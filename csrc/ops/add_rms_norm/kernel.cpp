#include "ops/add_rms_norm/kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/column_sums.h"
#include "ops/add_rms_norm/spec.h"

namespace opbridge {

template <typename T>
void AddRmsNormForward(const T* x, const T* residual, const T* weight, const T* bias, T* out, T* residual_out,
                       int64_t rows, int64_t cols, const AddRmsNormAttrs& attrs,
                       const ParallelFor& parallel_for) {
  if (rows <= 0 || cols <= 0) return;
  const double eps = static_cast<double>(static_cast<T>(attrs.eps));
  parallel_for(rows, RowGrain(cols), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      const T* rr = residual + r * cols;
      T* sr = residual_out + r * cols;
      T* yr = out + r * cols;
      double sum_squares = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        const T s = xr[j] + rr[j];
        sr[j] = s;
        sum_squares += static_cast<double>(s) * static_cast<double>(s);
      }
      const T rstd = static_cast<T>(1.0 / std::sqrt(sum_squares / static_cast<double>(cols) + eps));
      if (bias != nullptr) {
        for (int64_t j = 0; j < cols; ++j) yr[j] = (sr[j] * rstd) * weight[j] + bias[j];
      } else {
        for (int64_t j = 0; j < cols; ++j) yr[j] = (sr[j] * rstd) * weight[j];
      }
    }
  });
}

template <typename T>
void AddRmsNormBackward(const T* grad_out, const T* grad_residual_out, const T* residual_out, const T* weight,
                        T* grad_sum, T* grad_weight, T* grad_bias, int64_t rows, int64_t cols,
                        const AddRmsNormAttrs& attrs, const ParallelFor& parallel_for) {
  if (cols <= 0) return;
  if (rows <= 0) {
    std::fill(grad_weight, grad_weight + cols, T(0));
    if (grad_bias != nullptr) std::fill(grad_bias, grad_bias + cols, T(0));
    return;
  }
  const double eps = static_cast<double>(static_cast<T>(attrs.eps));
  const double inv_cols = 1.0 / static_cast<double>(cols);
  // Weight and bias gradients: identical whatever the parallelism.
  const bool want_bias = grad_bias != nullptr;
  ChunkedColumnSums sums(rows, cols, want_bias ? 2 : 1);
  ChunkedColumnSums* partials = &sums;

  parallel_for(sums.chunks(), 1, [=](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      double* pw = partials->Partial(0, chunk);
      double* pb = want_bias ? partials->Partial(1, chunk) : nullptr;
      for (int64_t r = partials->RowBegin(chunk); r < partials->RowEnd(chunk); ++r) {
        const T* sr = residual_out + r * cols;
        const T* gr = grad_out + r * cols;
        const T* grr = grad_residual_out != nullptr ? grad_residual_out + r * cols : nullptr;
        T* dsr = grad_sum + r * cols;
        double sum_squares = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
          const double v = static_cast<double>(sr[j]);
          sum_squares += v * v;
        }
        const double rstd = 1.0 / std::sqrt(sum_squares * inv_cols + eps);
        double dot = 0.0;  // sum_j (g_j * w_j) * s_j
        for (int64_t j = 0; j < cols; ++j) {
          const double g = static_cast<double>(gr[j]);
          const double sv = static_cast<double>(sr[j]);
          dot += g * static_cast<double>(weight[j]) * sv;
          pw[j] += g * sv * rstd;
          if (pb != nullptr) pb[j] += g;
        }
        const double coef = rstd * rstd * rstd * dot * inv_cols;
        for (int64_t j = 0; j < cols; ++j) {
          const double gw = static_cast<double>(gr[j]) * static_cast<double>(weight[j]);
          double d = rstd * gw - coef * static_cast<double>(sr[j]);
          if (grr != nullptr) d += static_cast<double>(grr[j]);
          dsr[j] = static_cast<T>(d);
        }
      }
    }
  });

  const auto to_t = [](double v) { return static_cast<T>(v); };
  sums.Total(0, grad_weight, to_t);
  if (want_bias) sums.Total(1, grad_bias, to_t);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                             \
  template void AddRmsNormForward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,      \
                                     const AddRmsNormAttrs&, const ParallelFor&);                           \
  template void AddRmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                      const AddRmsNormAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
#undef OPBRIDGE_INSTANTIATE

Status LaunchAddRmsNorm(const KernelArgs& args) {
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  const AddRmsNormAttrs attrs{args.attrs[0].number};
  return DispatchFloating(kAddRmsNormSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    AddRmsNormForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                         static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
                         static_cast<T*>(args.outputs[0]), static_cast<T*>(args.outputs[1]), rows, cols,
                         attrs, args.parallel_for);
  });
}

// Backward inputs: grad_out, grad_residual_out, residual_out, weight;
// outputs: the gradient of x + residual, grad_weight, grad_bias (or null).
Status LaunchAddRmsNormBackward(const KernelArgs& args) {
  const Shape& shape = args.input_infos[2].shape;
  const int64_t cols = shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(shape) / cols;
  const AddRmsNormAttrs attrs{args.attrs[0].number};
  return DispatchFloating(kAddRmsNormSpec, "x", args.input_infos[2].dtype, [&](auto tag) {
    using T = decltype(tag);
    AddRmsNormBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                          static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
                          static_cast<T*>(args.outputs[0]), static_cast<T*>(args.outputs[1]),
                          static_cast<T*>(args.outputs[2]), rows, cols, attrs, args.parallel_for);
  });
}

}  // namespace opbridge
