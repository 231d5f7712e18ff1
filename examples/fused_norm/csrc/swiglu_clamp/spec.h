// swiglu_clamp(Tensor gate, Tensor up, float limit=7.0) -> Tensor
//   y = silu(clamp(gate, max=limit)) * clamp(up, -limit, limit), elementwise
// (the clamped SwiGLU of recent mixture-of-experts models). Written on the
// SDK's kernel toolkit (kernel.cpp): SIMD for every target, four dtypes.
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace myops {

opbridge::Status InferSwigluClamp(const std::vector<opbridge::TensorInfo>& inputs,
                                  std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status LaunchSwigluClamp(const opbridge::KernelArgs& args);
opbridge::Status LaunchSwigluClampBackward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec kSwigluClampSpec =
    opbridge::OpSpec::Builder("swiglu_clamp", "SwigluClamp")
        .Doc("silu(clamp(gate, max=limit)) * clamp(up, -limit, limit), elementwise.")
        .Inputs({opbridge::Input("gate"), opbridge::Input("up")})
        .Attrs({opbridge::Attr::Float("limit", 7.0)})
        .Outputs({"y"})
        .Infer(InferSwigluClamp)
        .Forward(LaunchSwigluClamp)
        // The backward recomputes from the saved gate and up.
        .Backward(LaunchSwigluClampBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("gate", 0),
                         opbridge::SavedInput("up", 1)})
        .BackwardOutputs({opbridge::Gradient("grad_gate").Like(1), opbridge::Gradient("grad_up").Like(2)})
        .InputGradients({0, 1});

}  // namespace myops
