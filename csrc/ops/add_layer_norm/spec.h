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

inline const OpSpec kAddLayerNormSpec =
    OpSpec::Builder("add_layer_norm", "AddLayerNorm")
        .Doc(
            "residual_out = x + residual; out = (residual_out - mean) / sqrt(var + eps) (* weight) (+ bias), "
            "mean and biased variance over the last dimension: the residual step of a post- or pre-norm "
            "transformer in one pass.")
        .Inputs({Input("x"), Input("residual"), OptionalInput("weight"), OptionalInput("bias")})
        .Attrs({Attr::Float("eps", 1e-5)})
        .Outputs({"out", "residual_out"})
        .Infer(InferAddLayerNorm)
        .Forward(LaunchAddLayerNorm)
        // residual_out is all the backward needs (mean and variance are
        // recomputed from it); x and residual share one gradient.
        .Backward(LaunchAddLayerNormBackward)
        .BackwardInputs({GradOfOutput("grad_out", 0).Like(2), GradOfOutput("grad_residual_out", 1).Like(2),
                         SavedOutput("residual_out", 1), SavedInput("weight", 2)})
        .BackwardOutputs({Gradient("grad_sum").Like(2), Gradient("grad_weight").Optional(),
                          Gradient("grad_bias").Optional()})
        .InputGradients({0, 0, 1, 2})
        .InferBackward(InferAddLayerNormBackward);

}  // namespace opbridge
