// add_layer_norm(Tensor x, Tensor residual, Tensor? weight=None, Tensor? bias=None, float eps=1e-5)
//     -> (Tensor out, Tensor residual_out)
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferAddLayerNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status InferAddLayerNormBackward(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                 std::vector<TensorInfo>* outputs);
Status LaunchAddLayerNorm(const KernelArgs& args);
Status LaunchAddLayerNormBackward(const KernelArgs& args);

inline const OpSpec kAddLayerNormSpec{
    "add_layer_norm",
    "AddLayerNorm",
    "residual_out = x + residual; out = (residual_out - mean) / sqrt(var + eps) (* weight) (+ bias), "
    "mean and biased variance over the last dimension: the residual step of a post- or pre-norm "
    "transformer in one pass.",
    {{"x", false}, {"residual", false}, {"weight", true}, {"bias", true}},
    {{"eps", AttrType::kFloat, true, 1e-5}},
    {"out", "residual_out"},
    InferAddLayerNorm,
    LaunchAddLayerNorm,
    nullptr,
    // residual_out is all the backward needs (mean and variance are
    // recomputed from it); x and residual share one gradient.
    {{{"grad_out", TensorSource::kGradOutput, 0, 2},
      {"grad_residual_out", TensorSource::kGradOutput, 1, 2},
      {"residual_out", TensorSource::kOutput, 1},
      {"weight", TensorSource::kInput, 2}},
     {{"grad_sum", 2}, {"grad_weight", -1, true}, {"grad_bias", -1, true}},
     {0, 0, 1, 2},
     LaunchAddLayerNormBackward,
     InferAddLayerNormBackward},
};

}  // namespace opbridge
