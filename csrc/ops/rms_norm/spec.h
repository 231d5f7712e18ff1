// rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-6) -> Tensor
#pragma once

#include <vector>

#include "core/spec.h"

namespace opbridge {

Status InferRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRmsNorm(const KernelArgs& args);

inline const OpSpec kRmsNormSpec{
    "rms_norm",
    "RmsNorm",
    "x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias), over the last dimension of x.",
    {{"x", false}, {"weight", false}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-6}},
    {"y"},
    "rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, float eps, bool bias_grad) -> "
    "(Tensor, Tensor, Tensor)",
    InferRmsNorm,
    LaunchRmsNorm,
};

}  // namespace opbridge
