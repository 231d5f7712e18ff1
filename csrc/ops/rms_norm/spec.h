// rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-6) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRmsNorm(const KernelArgs& args);
Status LaunchRmsNormBackward(const KernelArgs& args);

inline const OpSpec kRmsNormSpec{
    "rms_norm",
    "RmsNorm",
    "x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias), over the last dimension of x.",
    {{"x", false}, {"weight", false}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-6}},
    {"y"},
    InferRmsNorm,
    LaunchRmsNorm,
    nullptr,
    {{{"grad_y", TensorSource::kGradOutput, 0, 1},
      {"x", TensorSource::kInput, 0},
      {"weight", TensorSource::kInput, 1}},
     {{"grad_x", 1}, {"grad_weight", 2}, {"grad_bias", 2, true}},
     {0, 1, 2},
     LaunchRmsNormBackward},
};

}  // namespace opbridge
