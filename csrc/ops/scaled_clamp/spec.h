// scaled_clamp(Tensor x, float scale, float min_val=0.0, float max_val=6.0) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferScaledClamp(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchScaledClamp(const KernelArgs& args);
Status LaunchScaledClampBackward(const KernelArgs& args);

inline const OpSpec kScaledClampSpec =
    OpSpec::Builder("scaled_clamp", "ScaledClamp")
        .Doc("clamp(x * scale, min_val, max_val), elementwise: ReLU6 with a scale.")
        .Inputs({Input("x")})
        .Attrs({Attr::Float("scale"), Attr::Float("min_val", 0.0), Attr::Float("max_val", 6.0)})
        .Outputs({"y"})
        .Infer(InferScaledClamp)
        .Forward(LaunchScaledClamp)
        .Backward(LaunchScaledClampBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0)})
        .BackwardOutputs({Gradient("grad_x").Like(1)})
        .InputGradients({0});

}  // namespace opbridge
