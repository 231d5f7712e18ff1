// Plain C++ kernels (no SIMD toolkit): one batch row per task.
#include <cstdint>

#include "opbridge/checks.h"
#include "pairwise_dot/spec.h"

namespace pairwise_dot_ops {

using opbridge::KernelArgs;
using opbridge::Status;

namespace {

struct Sizes {
  int64_t batch, features, dim;
};

Sizes SizesOf(const opbridge::Shape& shape) { return {shape[0], shape[1], shape[2]}; }

template <typename T>
void Forward(const T* x, T* y, const Sizes& s, const opbridge::ParallelFor& parallel_for) {
  const int64_t pairs = s.features * (s.features - 1) / 2;
  parallel_for(s.batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* row = x + b * s.features * s.dim;
      T* out = y + b * pairs;
      for (int64_t i = 0; i < s.features; ++i) {
        for (int64_t j = i + 1; j < s.features; ++j) {
          double sum = 0.0;
          for (int64_t k = 0; k < s.dim; ++k) sum += double(row[i * s.dim + k]) * double(row[j * s.dim + k]);
          *out++ = static_cast<T>(sum);
        }
      }
    }
  });
}

template <typename T>
void Backward(const T* grad_y, const T* x, T* grad_x, const Sizes& s,
              const opbridge::ParallelFor& parallel_for) {
  const int64_t pairs = s.features * (s.features - 1) / 2;
  parallel_for(s.batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* row = x + b * s.features * s.dim;
      const T* g = grad_y + b * pairs;
      T* out = grad_x + b * s.features * s.dim;
      for (int64_t n = 0; n < s.features * s.dim; ++n) out[n] = T(0);
      for (int64_t i = 0; i < s.features; ++i) {
        for (int64_t j = i + 1; j < s.features; ++j) {
          const T w = *g++;
          for (int64_t k = 0; k < s.dim; ++k) {
            out[i * s.dim + k] += w * row[j * s.dim + k];
            out[j * s.dim + k] += w * row[i * s.dim + k];
          }
        }
      }
    }
  });
}

}  // namespace

Status LaunchPairwiseDot(const KernelArgs& args) {
  const Sizes s = SizesOf(args.input_infos[0].shape);
  return opbridge::DispatchFloating(kPairwiseDotSpec, "features", args.input_infos[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    Forward(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), s, args.parallel_for);
  });
}

// Backward inputs: grad_y, features; output: grad_features.
Status LaunchPairwiseDotBackward(const KernelArgs& args) {
  const Sizes s = SizesOf(args.input_infos[1].shape);
  return opbridge::DispatchFloating(kPairwiseDotSpec, "features", args.input_infos[1].dtype, [&](auto zero) {
    using T = decltype(zero);
    Backward(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
             static_cast<T*>(args.outputs[0]), s, args.parallel_for);
  });
}

}  // namespace pairwise_dot_ops
