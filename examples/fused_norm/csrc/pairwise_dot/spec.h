// pairwise_dot(Tensor features) -> Tensor
//   features [B, F, D] -> y [B, F * (F - 1) / 2]: the dot products of every
//   pair of feature vectors i < j, in row-major order (the feature crossing of
//   recommender models). Written on the SDK's toolkit (kernel.cpp): the small
//   products of opbridge/toolkit/products-inl.h, one batch row per task.
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace myops {

opbridge::Status InferPairwiseDot(const std::vector<opbridge::TensorInfo>& inputs,
                                  std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status LaunchPairwiseDot(const opbridge::KernelArgs& args);
opbridge::Status LaunchPairwiseDotBackward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec kPairwiseDotSpec =
    opbridge::OpSpec::Builder("pairwise_dot", "PairwiseDot")
        .Doc(
            "The dot products of every pair of feature vectors: features [B, F, D] -> y [B, F * (F - 1) / "
            "2], "
            "y[b, p] = <features[b, i], features[b, j]> for the pairs i < j in row-major order.")
        .Inputs({opbridge::Input("features")})
        .Outputs({"y"})
        .Infer(InferPairwiseDot)
        .Forward(LaunchPairwiseDot)
        // grad_features[b, i] = sum over j != i of grad_y[b, pair(i, j)] * features[b, j].
        .Backward(LaunchPairwiseDotBackward)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0), opbridge::SavedInput("features", 0)})
        .BackwardOutputs({opbridge::Gradient("grad_features").Like(1)})
        .InputGradients({0});

}  // namespace myops
