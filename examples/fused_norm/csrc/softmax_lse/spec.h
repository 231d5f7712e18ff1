// softmax_lse(Tensor x, float temperature=1.0) -> (Tensor y, Tensor lse)
//   z = x / temperature; y = softmax(z, -1); lse = logsumexp(z, -1), of shape
//   x.shape[:-1]. Two outputs, a backward through both, and masked logits
//   (-inf) taken: the fast-kernels guide's row-reduction example, on the
//   SDK's row skeleton (kernel.cpp).
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace myops {

opbridge::Status InferSoftmaxLse(const std::vector<opbridge::TensorInfo>& inputs,
                                 std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status InferSoftmaxLseAttrs(const std::vector<opbridge::TensorInfo>& inputs,
                                      const std::vector<opbridge::AttrValue>& attrs,
                                      std::vector<opbridge::TensorInfo>* outputs);
// Ok for a positive, finite temperature; else an error naming the attribute.
opbridge::Status CheckTemperature(double temperature);
opbridge::Status LaunchSoftmaxLse(const opbridge::KernelArgs& args);
opbridge::Status LaunchSoftmaxLseBackward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec kSoftmaxLseSpec =
    opbridge::OpSpec::Builder("softmax_lse", "SoftmaxLse")
        .Doc("softmax(x / temperature) over the last dimension of x, and its logsumexp (x.shape[:-1]).")
        .Inputs({opbridge::Input("x")})
        .Attrs({opbridge::Attr::Float("temperature", 1.0)})
        .Outputs({"y", "lse"})
        .Infer(InferSoftmaxLse)
        .InferAttrs(InferSoftmaxLseAttrs)
        // Masked logits are -inf; so is the logsumexp of a row with nothing left.
        .Values("x", opbridge::kNegInfValues)
        .Values("lse", opbridge::kNegInfValues)
        .Forward(LaunchSoftmaxLse)
        // grad_x = (y * (grad_y - sum(grad_y * y)) + grad_lse * y) / temperature,
        // from the saved y: x is not kept.
        .Backward(LaunchSoftmaxLseBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(2), opbridge::GradOfOutput("grad_lse", 1),
                         opbridge::SavedOutput("y", 0)})
        .BackwardOutputs({opbridge::Gradient("grad_x").Like(2)})
        .InputGradients({0});

}  // namespace myops
