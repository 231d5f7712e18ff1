// layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-5) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferLayerNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status InferLayerNormBackward(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                              std::vector<TensorInfo>* outputs);
Status LaunchLayerNorm(const KernelArgs& args);
Status LaunchLayerNormBackward(const KernelArgs& args);

inline const OpSpec kLayerNormSpec{
    "layer_norm",
    "LayerNorm",
    "(x - mean(x, -1)) / sqrt(var(x, -1) + eps) (* weight) (+ bias), over the last dimension of x "
    "(biased variance, as torch.nn.functional.layer_norm).",
    {{"x", false}, {"weight", true}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-5}},
    {"y"},
    InferLayerNorm,
    LaunchLayerNorm,
    nullptr,
    // Mean and variance are recomputed from x. The parameter gradients take
    // their [cols] shape from x (weight may be absent while bias is not).
    {{{"grad_y", TensorSource::kGradOutput, 0, 1},
      {"x", TensorSource::kInput, 0},
      {"weight", TensorSource::kInput, 1}},
     {{"grad_x", 1}, {"grad_weight", -1, true}, {"grad_bias", -1, true}},
     {0, 1, 2},
     LaunchLayerNormBackward,
     InferLayerNormBackward},
};

}  // namespace opbridge
