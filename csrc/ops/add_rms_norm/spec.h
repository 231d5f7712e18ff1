// add_rms_norm(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, float eps=1e-6)
//     -> (Tensor out, Tensor residual_out)
#pragma once

#include <vector>

#include "core/spec.h"

namespace opbridge {

Status InferAddRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchAddRmsNorm(const KernelArgs& args);

inline const OpSpec kAddRmsNormSpec{
    "add_rms_norm",
    "AddRmsNorm",
    "residual_out = x + residual; out = residual_out * rsqrt(mean(residual_out^2, -1) + eps) * weight "
    "(+ bias), over the last dimension: the pre-norm residual step in one pass.",
    {{"x", false}, {"residual", false}, {"weight", false}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-6}},
    {"out", "residual_out"},
    "add_rms_norm_backward(Tensor grad_out, Tensor? grad_residual_out, Tensor residual_out, Tensor weight, "
    "float eps, bool bias_grad) -> (Tensor, Tensor, Tensor)",
    InferAddRmsNorm,
    LaunchAddRmsNorm,
};

}  // namespace opbridge
