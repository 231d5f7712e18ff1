// rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferRotaryEmbedding(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRotaryEmbedding(const KernelArgs& args);
Status LaunchRotaryEmbeddingBackward(const KernelArgs& args);

inline const OpSpec kRotaryEmbeddingSpec{
    "rotary_embedding",
    "RotaryEmbedding",
    "Rotary position embedding of x [batch, seq, heads, head_dim] by cos/sin [seq, rotary_dim / 2] (shared "
    "by "
    "the batch) or [batch, seq, rotary_dim / 2] (per batch row, e.g. from position ids; batch 1 broadcasts): "
    "pairs "
    "(i, i + rotary_dim / 2) (GPT-NeoX / LLaMA) or, interleaved, (2i, 2i + 1) (GPT-J) are rotated; dims past "
    "rotary_dim (partial rotary) pass through.",
    {{"x", false}, {"cos", false}, {"sin", false}},
    {{"interleaved", AttrType::kBool, true, 0.0}},
    {"y"},
    InferRotaryEmbedding,
    LaunchRotaryEmbedding,
    nullptr,
    // cos and sin are usually fixed tables: their gradients (a reduction
    // over heads, and over batch for a shared table) are computed only when
    // asked for; they have cos's and sin's shapes.
    {{{"grad_y", TensorSource::kGradOutput, 0, 1},
      {"x", TensorSource::kInput, 0},
      {"cos", TensorSource::kInput, 1},
      {"sin", TensorSource::kInput, 2}},
     {{"grad_x", 1}, {"grad_cos", 2, true}, {"grad_sin", 3, true}},
     {0, 1, 2},
     LaunchRotaryEmbeddingBackward},
};

}  // namespace opbridge
