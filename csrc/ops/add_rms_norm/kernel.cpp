#include "ops/add_rms_norm/kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/checks.h"
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
  // A fixed number of row chunks (a function of the shape, not of the thread
  // count), each with its own partial weight/bias sums.
  const int64_t chunk_rows = std::max<int64_t>(RowGrain(cols), (rows + 63) / 64);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const bool want_bias = grad_bias != nullptr;
  std::vector<double> partial_weight(static_cast<size_t>(chunks * cols), 0.0);
  std::vector<double> partial_bias(want_bias ? static_cast<size_t>(chunks * cols) : 0, 0.0);
  double* pw_all = partial_weight.data();
  double* pb_all = partial_bias.data();

  parallel_for(chunks, 1, [=](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      double* pw = pw_all + chunk * cols;
      double* pb = want_bias ? pb_all + chunk * cols : nullptr;
      const int64_t row_end = std::min(rows, (chunk + 1) * chunk_rows);
      for (int64_t r = chunk * chunk_rows; r < row_end; ++r) {
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

  for (int64_t j = 0; j < cols; ++j) {
    double w_sum = 0.0;
    double b_sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      w_sum += pw_all[chunk * cols + j];
      if (want_bias) b_sum += pb_all[chunk * cols + j];
    }
    grad_weight[j] = static_cast<T>(w_sum);
    if (want_bias) grad_bias[j] = static_cast<T>(b_sum);
  }
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

}  // namespace opbridge
