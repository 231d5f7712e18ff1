#include "ops/scaled_clamp/kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/checks.h"
#include "ops/scaled_clamp/spec.h"

namespace opbridge {

namespace {

constexpr int64_t kElementGrain = 1 << 15;

}  // namespace

template <typename T>
void ScaledClampForward(const T* x, T* y, int64_t n, const ScaledClampAttrs& attrs,
                        const ParallelFor& parallel_for) {
  const T scale = static_cast<T>(attrs.scale);
  const T lo = static_cast<T>(attrs.min_val);
  const T hi = static_cast<T>(attrs.max_val);
  if (std::isnan(lo) || std::isnan(hi)) {
    // torch.clamp propagates a NaN bound to every element.
    std::fill(y, y + n, std::numeric_limits<T>::quiet_NaN());
    return;
  }
  parallel_for(n, kElementGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // std::max/std::min return their first argument for NaN, so NaN
      // propagates; with min_val > max_val the result is max_val, as in torch.
      y[i] = std::min(std::max(x[i] * scale, lo), hi);
    }
  });
}

template <typename T>
void ScaledClampBackward(const T* grad_y, const T* x, T* grad_x, int64_t n, const ScaledClampAttrs& attrs,
                         const ParallelFor& parallel_for) {
  const T scale = static_cast<T>(attrs.scale);
  const T lo = static_cast<T>(attrs.min_val);
  const T hi = static_cast<T>(attrs.max_val);
  parallel_for(n, kElementGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T v = x[i] * scale;
      grad_x[i] = (v >= lo && v <= hi) ? grad_y[i] * scale : T(0);
    }
  });
}

Status LaunchScaledClamp(const KernelArgs& args) {
  const ScaledClampAttrs attrs{args.attrs[0].number, args.attrs[1].number, args.attrs[2].number};
  const int64_t n = NumElements(args.input_infos[0].shape);
  return DispatchFloating(kScaledClampSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    ScaledClampForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), n, attrs,
                          args.parallel_for);
  });
}

template void ScaledClampForward<float>(const float*, float*, int64_t, const ScaledClampAttrs&,
                                        const ParallelFor&);
template void ScaledClampForward<double>(const double*, double*, int64_t, const ScaledClampAttrs&,
                                         const ParallelFor&);
template void ScaledClampBackward<float>(const float*, const float*, float*, int64_t, const ScaledClampAttrs&,
                                         const ParallelFor&);
template void ScaledClampBackward<double>(const double*, const double*, double*, int64_t,
                                          const ScaledClampAttrs&, const ParallelFor&);

}  // namespace opbridge
