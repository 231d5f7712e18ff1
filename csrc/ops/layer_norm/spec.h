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

inline const OpSpec kLayerNormSpec =
    OpSpec::Builder("layer_norm", "LayerNorm")
        .Doc(
            "(x - mean(x, -1)) / sqrt(var(x, -1) + eps) (* weight) (+ bias), over the last dimension of x "
            "(biased variance, as torch.nn.functional.layer_norm).")
        .Inputs({Input("x"), OptionalInput("weight"), OptionalInput("bias")})
        .Attrs({Attr::Float("eps", 1e-5)})
        .Outputs({"y"})
        .Infer(InferLayerNorm)
        .Forward(LaunchLayerNorm)
        // Mean and variance are recomputed from x. The parameter gradients take
        // their [cols] shape from x (weight may be absent while bias is not).
        .Backward(LaunchLayerNormBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0), SavedInput("weight", 1)})
        .BackwardOutputs({Gradient("grad_x").Like(1), Gradient("grad_weight").Optional(),
                          Gradient("grad_bias").Optional()})
        .InputGradients({0, 1, 2})
        .InferBackward(InferLayerNormBackward);

}  // namespace opbridge
