// normalize_image(Tensor image, float[] mean, float[] std, bool channels_last_in=True) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferNormalizeImage(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status InferNormalizeImageAttrs(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                std::vector<TensorInfo>* outputs);
Status LaunchNormalizeImage(const KernelArgs& args);
Status LaunchNormalizeImageBackward(const KernelArgs& args);
Status InferNormalizeImageBackward(const std::vector<TensorInfo>& inputs, const std::vector<AttrValue>& attrs,
                                   std::vector<TensorInfo>* outputs);

inline const OpSpec kNormalizeImageSpec =
    OpSpec::Builder("normalize_image", "NormalizeImage")
        .Doc(
            "(image / 255 - mean[c]) / std[c] per channel c, from a [N, H, W, C] (channels_last_in, default) "
            "or [N, C, H, W] image to a [N, C, H, W] output in one pass. uint8 input gives float32; a float "
            "input uses the same formula (its values are on the 0..255 scale) and keeps its dtype.")
        .Inputs({Input("image")})
        .Attrs({Attr::Floats("mean"), Attr::Floats("std"), Attr::Bool("channels_last_in", true)})
        .Outputs({"y"})
        .Infer(InferNormalizeImage)
        .InferAttrs(InferNormalizeImageAttrs)
        .Forward(LaunchNormalizeImage)
        // The op is affine: the backward needs only std and the layout.
        .Backward(LaunchNormalizeImageBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0)})
        .BackwardOutputs({Gradient("grad_image")})
        .InputGradients({0})
        .InferBackward(InferNormalizeImageBackward);

}  // namespace opbridge
