// gated_rope(Tensor x, Tensor positions, Tensor gate, float base=10000.0) -> Tensor
//   x [B, S, H, D] (D even), positions [B, S] (int64 or int32), gate [H]:
//   y[b, s, h, :] = gate[h] * rotate(x[b, s, h, :], positions[b, s] * base^(-2i / D)),
//   the rotation of each pair (i, i + D/2) by its angle (LLaMA's rotary embedding),
//   scaled by a learnable gate per head. Written on the SDK's toolkit (kernel.cpp):
//   the per-head gate broadcast and its gradient's sum over B, S and D
//   (opbridge/toolkit/axes.h), the angles' cosines and sines (opbridge/toolkit/trig-inl.h).
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace myops {

opbridge::Status InferGatedRope(const std::vector<opbridge::TensorInfo>& inputs,
                                std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status LaunchGatedRope(const opbridge::KernelArgs& args);
opbridge::Status LaunchGatedRopeBackward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec kGatedRopeSpec =
    opbridge::OpSpec::Builder("gated_rope", "GatedRope")
        .Doc(
            "Rotary position embedding with a learnable gate per head: x [B, S, H, D], positions [B, S] "
            "(int64 or int32), gate [H]; y[b, s, h] = gate[h] * the rotation of the pairs (i, i + D/2) of "
            "x[b, s, h] by the angles positions[b, s] * base^(-2i / D).")
        .Inputs({opbridge::Input("x"), opbridge::Input("positions"), opbridge::Input("gate")})
        .Attrs({opbridge::Attr::Float("base", 10000.0)})
        .Outputs({"y"})
        .Infer(InferGatedRope)
        .Forward(LaunchGatedRope)
        // The backward recomputes the angles from the saved positions:
        //   grad_x = gate * the inverse rotation of grad_y;
        //   grad_gate[h] = sum over b, s and the pairs of grad_y * (y / gate).
        .Backward(LaunchGatedRopeBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("x", 0),
                         opbridge::SavedInput("positions", 1), opbridge::SavedInput("gate", 2)})
        .BackwardOutputs({opbridge::Gradient("grad_x").Like(1).Optional(),
                          opbridge::Gradient("grad_gate").Like(3).Optional()})
        .InputGradients({0, -1, 1})
        .NoGradient("positions");

}  // namespace myops
