// add_rms_norm(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, float eps=1e-6)
//     -> (Tensor out, Tensor residual_out)
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferAddRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchAddRmsNorm(const KernelArgs& args);
Status LaunchAddRmsNormBackward(const KernelArgs& args);

inline const OpSpec kAddRmsNormSpec =
    OpSpec::Builder("add_rms_norm", "AddRmsNorm")
        .Doc(
            "residual_out = x + residual; out = residual_out * rsqrt(mean(residual_out^2, -1) + eps) * "
            "weight "
            "(+ bias), over the last dimension: the pre-norm residual step in one pass.")
        .Inputs({Input("x"), Input("residual"), Input("weight"), OptionalInput("bias")})
        .Attrs({Attr::Float("eps", 1e-6)})
        .Outputs({"out", "residual_out"})
        .Infer(InferAddRmsNorm)
        .Forward(LaunchAddRmsNorm)
        // residual_out is all the backward needs (rstd is recomputed from it);
        // x and residual share one gradient.
        .Backward(LaunchAddRmsNormBackward)
        .BackwardInputs({GradOfOutput("grad_out", 0).Like(2), GradOfOutput("grad_residual_out", 1).Like(2),
                         SavedOutput("residual_out", 1), SavedInput("weight", 2)})
        .BackwardOutputs({Gradient("grad_sum").Like(2), Gradient("grad_weight").Like(3),
                          Gradient("grad_bias").Like(3).Optional()})
        .InputGradients({0, 0, 1, 2});

}  // namespace opbridge
