// Framework-free kernels: one row per task, sums of squares in double;
// weight and bias gradients summed over fixed row chunks
// (opbridge/column_sums.h), so they do not depend on the thread count.
#include <cmath>
#include <cstdint>

#include "fused_norm/spec.h"
#include "opbridge/checks.h"
#include "opbridge/column_sums.h"

namespace myops {

using opbridge::KernelArgs;
using opbridge::Status;

namespace {

struct Rows {
  int64_t rows;
  int64_t cols;
};

Rows RowsOf(const opbridge::Shape& shape) {
  const int64_t cols = shape.back();
  return {cols == 0 ? 0 : opbridge::NumElements(shape) / cols, cols};
}

template <typename T>
double Rstd(const T* row, int64_t cols, double eps) {
  double sum = 0.0;
  for (int64_t j = 0; j < cols; ++j) sum += static_cast<double>(row[j]) * static_cast<double>(row[j]);
  return 1.0 / std::sqrt(sum / static_cast<double>(cols) + eps);
}

}  // namespace

Status LaunchFusedNorm(const KernelArgs& args) {
  const Rows dims = RowsOf(args.input_infos[0].shape);
  const double eps = args.attrs[0].number;
  return opbridge::DispatchFloating(kFusedNormSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(args.inputs[0]);
    const T* weight = static_cast<const T*>(args.inputs[1]);
    const T* bias = static_cast<const T*>(args.inputs[2]);
    T* y = static_cast<T*>(args.outputs[0]);
    args.parallel_for(dims.rows, opbridge::RowGrain(dims.cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * dims.cols;
        T* yr = y + r * dims.cols;
        const T rstd = static_cast<T>(Rstd(xr, dims.cols, eps));
        for (int64_t j = 0; j < dims.cols; ++j) yr[j] = xr[j] * rstd * weight[j] + bias[j];
      }
    });
  });
}

// Backward inputs: grad_y, x, weight; outputs: grad_x, grad_weight and
// grad_bias (each of the last two null when nobody needs it).
//   xhat = x * rstd;  grad_x = rstd * (g*w - xhat * mean(g*w*xhat))
//   grad_weight = sum over rows of g * xhat;  grad_bias = sum over rows of g
Status LaunchFusedNormBackward(const KernelArgs& args) {
  const Rows dims = RowsOf(args.input_infos[1].shape);
  const double eps = args.attrs[0].number;
  return opbridge::DispatchFloating(kFusedNormSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* grad_y = static_cast<const T*>(args.inputs[0]);
    const T* x = static_cast<const T*>(args.inputs[1]);
    const T* weight = static_cast<const T*>(args.inputs[2]);
    T* grad_x = static_cast<T*>(args.outputs[0]);
    T* grad_weight = static_cast<T*>(args.outputs[1]);
    T* grad_bias = static_cast<T*>(args.outputs[2]);
    opbridge::ChunkedColumnSums sums(dims.rows, dims.cols, 2);
    args.parallel_for(sums.chunks(), 1, [&](int64_t first, int64_t last) {
      for (int64_t chunk = first; chunk < last; ++chunk) {
        double* dw = sums.Partial(0, chunk);
        double* db = sums.Partial(1, chunk);
        for (int64_t r = sums.RowBegin(chunk); r < sums.RowEnd(chunk); ++r) {
          const T* xr = x + r * dims.cols;
          const T* gr = grad_y + r * dims.cols;
          const double rstd = Rstd(xr, dims.cols, eps);
          double dot = 0.0;
          for (int64_t j = 0; j < dims.cols; ++j) {
            const double xhat = static_cast<double>(xr[j]) * rstd;
            dot += static_cast<double>(gr[j]) * static_cast<double>(weight[j]) * xhat;
            dw[j] += static_cast<double>(gr[j]) * xhat;
            db[j] += static_cast<double>(gr[j]);
          }
          const double mean = dot / static_cast<double>(dims.cols);
          T* out = grad_x + r * dims.cols;
          for (int64_t j = 0; j < dims.cols; ++j) {
            const double xhat = static_cast<double>(xr[j]) * rstd;
            out[j] = static_cast<T>(
                rstd * (static_cast<double>(gr[j]) * static_cast<double>(weight[j]) - xhat * mean));
          }
        }
      }
    });
    auto to_t = [](double v) { return static_cast<T>(v); };
    if (grad_weight != nullptr) sums.Total(0, grad_weight, to_t);
    if (grad_bias != nullptr) sums.Total(1, grad_bias, to_t);
  });
}

}  // namespace myops
