// bias_gelu(Tensor x, Tensor bias, str approximate="none") -> Tensor
#pragma once

#include <string>
#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferBiasGelu(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status InferBiasGeluAttrs(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                          std::vector<TensorInfo>* outputs);
Status LaunchBiasGelu(const KernelArgs& args);
Status LaunchBiasGeluBackward(const KernelArgs& args);

// "none" (the exact, erf form) or "tanh", as torch.nn.functional.gelu names
// them; anything else is an error naming the attribute.
Status ParseGeluApproximate(const std::string& approximate, bool* use_tanh);

inline const OpSpec kBiasGeluSpec{
    "bias_gelu",
    "BiasGelu",
    "gelu(x + bias) with bias over the last dimension of x; approximate 'none' (erf) or 'tanh', as in "
    "torch.nn.functional.gelu.",
    {{"x", false}, {"bias", false}},
    {{"approximate", AttrType::kString, true, 0.0, "none"}},
    {"y"},
    InferBiasGelu,
    LaunchBiasGelu,
    InferBiasGeluAttrs,
    {{{"grad_y", TensorSource::kGradOutput, 0, 1},
      {"x", TensorSource::kInput, 0},
      {"bias", TensorSource::kInput, 1}},
     {{"grad_x", 1}, {"grad_bias", 2, true}},
     {0, 1},
     LaunchBiasGeluBackward},
};

}  // namespace opbridge
