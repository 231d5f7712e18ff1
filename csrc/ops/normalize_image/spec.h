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

inline const OpSpec kNormalizeImageSpec{
    "normalize_image",
    "NormalizeImage",
    "(image / 255 - mean[c]) / std[c] per channel c, from a [N, H, W, C] (channels_last_in, default) or "
    "[N, C, H, W] image to a [N, C, H, W] output in one pass. uint8 input gives float32; a float input uses "
    "the same formula (its values are on the 0..255 scale) and keeps its dtype.",
    {{"image", false}},
    {{"mean", AttrType::kFloats, false, 0.0},
     {"std", AttrType::kFloats, false, 0.0},
     {"channels_last_in", AttrType::kBool, true, 1.0}},
    {"y"},
    InferNormalizeImage,
    LaunchNormalizeImage,
    InferNormalizeImageAttrs,
    // The op is affine: the backward needs only std and the layout.
    {{{"grad_y", TensorSource::kGradOutput, 0}},
     {{"grad_image", -1}},
     {0},
     LaunchNormalizeImageBackward,
     InferNormalizeImageBackward},
};

}  // namespace opbridge
