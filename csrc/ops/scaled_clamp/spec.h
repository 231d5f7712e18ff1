// scaled_clamp(Tensor x, float scale, float min_val=0.0, float max_val=6.0) -> Tensor
#pragma once

#include <vector>

#include "core/spec.h"

namespace opbridge {

Status InferScaledClamp(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchScaledClamp(const KernelArgs& args);

inline const OpSpec kScaledClampSpec{
    "scaled_clamp",
    "ScaledClamp",
    "clamp(x * scale, min_val, max_val), elementwise: ReLU6 with a scale.",
    {{"x", false}},
    {{"scale", AttrType::kFloat, false, 0.0},
     {"min_val", AttrType::kFloat, true, 0.0},
     {"max_val", AttrType::kFloat, true, 6.0}},
    {"y"},
    "scaled_clamp_backward(Tensor grad_y, Tensor x, float scale, float min_val, float max_val) -> Tensor",
    InferScaledClamp,
    LaunchScaledClamp,
};

}  // namespace opbridge
