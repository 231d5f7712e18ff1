// fused_norm(Tensor x, Tensor weight, Tensor bias, float eps=1e-5) -> Tensor
//   y = x * rsqrt(mean(x^2, -1) + eps) * weight + bias, over the last dimension.
// The operator of the background articles, as a user project on the opbridge
// SDK: this spec is all the registration there is, for PyTorch (torch.ops.myops)
// and for ONNX Runtime (domain com.example.myops).
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace myops {

opbridge::Status InferFusedNorm(const std::vector<opbridge::TensorInfo>& inputs,
                                std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status LaunchFusedNorm(const opbridge::KernelArgs& args);
opbridge::Status LaunchFusedNormBackward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec kFusedNormSpec{
    "fused_norm",
    "FusedNorm",
    "x * rsqrt(mean(x^2, -1) + eps) * weight + bias, over the last dimension of x.",
    {{"x", false}, {"weight", false}, {"bias", false}},
    {{"eps", opbridge::AttrType::kFloat, true, 1e-5}},
    {"y"},
    InferFusedNorm,
    LaunchFusedNorm,
    nullptr,
    // The backward recomputes rstd from the saved x: nothing else is kept.
    {{{"grad_y", opbridge::TensorSource::kGradOutput, 0, 1},
      {"x", opbridge::TensorSource::kInput, 0},
      {"weight", opbridge::TensorSource::kInput, 1}},
     {{"grad_x", 1}, {"grad_weight", 2, true}, {"grad_bias", 2, true}},
     {0, 1, 2},
     LaunchFusedNormBackward},
};

}  // namespace myops
