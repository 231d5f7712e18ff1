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

inline const OpSpec kBiasGeluSpec =
    OpSpec::Builder("bias_gelu", "BiasGelu")
        .Doc(
            "gelu(x + bias) with bias over the last dimension of x; approximate 'none' (erf) or 'tanh', as "
            "in "
            "torch.nn.functional.gelu.")
        .Inputs({Input("x"), Input("bias")})
        .Attrs({Attr::String("approximate", "none")})
        .Outputs({"y"})
        .Infer(InferBiasGelu)
        .InferAttrs(InferBiasGeluAttrs)
        .Forward(LaunchBiasGelu)
        .Backward(LaunchBiasGeluBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0), SavedInput("bias", 1)})
        .BackwardOutputs({Gradient("grad_x").Like(1), Gradient("grad_bias").Like(2).Optional()})
        .InputGradients({0, 1});

}  // namespace opbridge
