// add_rms_norm(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, float eps=1e-6)
//     -> (Tensor out, Tensor residual_out)
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferAddRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchAddRmsNorm(const KernelArgs& args);
Status LaunchAddRmsNormBackward(const KernelArgs& args);

inline const OpSpec kAddRmsNormSpec{
    "add_rms_norm",
    "AddRmsNorm",
    "residual_out = x + residual; out = residual_out * rsqrt(mean(residual_out^2, -1) + eps) * weight "
    "(+ bias), over the last dimension: the pre-norm residual step in one pass.",
    {{"x", false}, {"residual", false}, {"weight", false}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-6}},
    {"out", "residual_out"},
    InferAddRmsNorm,
    LaunchAddRmsNorm,
    nullptr,
    // residual_out is all the backward needs (rstd is recomputed from it);
    // x and residual share one gradient.
    {{{"grad_out", TensorSource::kGradOutput, 0, 2},
      {"grad_residual_out", TensorSource::kGradOutput, 1, 2},
      {"residual_out", TensorSource::kOutput, 1},
      {"weight", TensorSource::kInput, 2}},
     {{"grad_sum", 2}, {"grad_weight", 3}, {"grad_bias", 3, true}},
     {0, 0, 1, 2},
     LaunchAddRmsNormBackward},
};

}  // namespace opbridge
