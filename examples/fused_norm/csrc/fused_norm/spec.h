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

inline const opbridge::OpSpec kFusedNormSpec =
    opbridge::OpSpec::Builder("fused_norm", "FusedNorm")
        .Doc("x * rsqrt(mean(x^2, -1) + eps) * weight + bias, over the last dimension of x.")
        .Inputs({opbridge::Input("x"), opbridge::Input("weight"), opbridge::Input("bias")})
        .Attrs({opbridge::Attr::Float("eps", 1e-5)})
        .Outputs({"y"})
        .Infer(InferFusedNorm)
        .Forward(LaunchFusedNorm)
        // The backward recomputes rstd from the saved x: nothing else is kept.
        .Backward(LaunchFusedNormBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("x", 0),
                         opbridge::SavedInput("weight", 1)})
        .BackwardOutputs({opbridge::Gradient("grad_x").Like(1),
                          opbridge::Gradient("grad_weight").Like(2).Optional(),
                          opbridge::Gradient("grad_bias").Like(2).Optional()})
        .InputGradients({0, 1, 2});

}  // namespace myops
