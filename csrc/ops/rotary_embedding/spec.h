// rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor
#pragma once

#include <vector>

#include "core/spec.h"

namespace opbridge {

Status InferRotaryEmbedding(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRotaryEmbedding(const KernelArgs& args);

inline const OpSpec kRotaryEmbeddingSpec{
    "rotary_embedding",
    "RotaryEmbedding",
    "Rotary position embedding of x [batch, seq, heads, head_dim] by cos/sin [seq, rotary_dim / 2]: pairs "
    "(i, i + rotary_dim / 2) (GPT-NeoX / LLaMA) or, interleaved, (2i, 2i + 1) (GPT-J) are rotated; dims past "
    "rotary_dim (partial rotary) pass through.",
    {{"x", false}, {"cos", false}, {"sin", false}},
    {{"interleaved", AttrType::kBool, true, 0.0}},
    {"y"},
    "rotary_embedding_backward(Tensor grad_y, Tensor x, Tensor cos, Tensor sin, bool interleaved, "
    "bool cos_sin_grad) -> (Tensor, Tensor, Tensor)",
    InferRotaryEmbedding,
    LaunchRotaryEmbedding,
};

}  // namespace opbridge
