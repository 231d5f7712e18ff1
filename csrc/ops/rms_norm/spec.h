// rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-6) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferRmsNorm(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRmsNorm(const KernelArgs& args);
Status LaunchRmsNormBackward(const KernelArgs& args);

inline const OpSpec kRmsNormSpec =
    OpSpec::Builder("rms_norm", "RmsNorm")
        .Doc("x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias), over the last dimension of x.")
        .Inputs({Input("x"), Input("weight"), OptionalInput("bias")})
        .Attrs({Attr::Float("eps", 1e-6)})
        .Outputs({"y"})
        .Infer(InferRmsNorm)
        .Forward(LaunchRmsNorm)
        .Backward(LaunchRmsNormBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0), SavedInput("weight", 1)})
        .BackwardOutputs({Gradient("grad_x").Like(1), Gradient("grad_weight").Like(2),
                          Gradient("grad_bias").Like(2).Optional()})
        .InputGradients({0, 1, 2});

}  // namespace opbridge
