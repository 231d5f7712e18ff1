// scaled_clamp(Tensor x, float scale, float min_val=0.0, float max_val=6.0) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferScaledClamp(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchScaledClamp(const KernelArgs& args);
Status LaunchScaledClampBackward(const KernelArgs& args);

inline const OpSpec kScaledClampSpec{
    "scaled_clamp",
    "ScaledClamp",
    "clamp(x * scale, min_val, max_val), elementwise: ReLU6 with a scale.",
    {{"x", false}},
    {{"scale", AttrType::kFloat, false, 0.0},
     {"min_val", AttrType::kFloat, true, 0.0},
     {"max_val", AttrType::kFloat, true, 6.0}},
    {"y"},
    InferScaledClamp,
    LaunchScaledClamp,
    nullptr,
    {{{"grad_y", TensorSource::kGradOutput, 0, 1}, {"x", TensorSource::kInput, 0}},
     {{"grad_x", 1}},
     {0},
     LaunchScaledClampBackward},
};

}  // namespace opbridge
