// rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace opbridge {

Status InferRotaryEmbedding(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchRotaryEmbedding(const KernelArgs& args);
Status LaunchRotaryEmbeddingBackward(const KernelArgs& args);

inline const OpSpec kRotaryEmbeddingSpec =
    OpSpec::Builder("rotary_embedding", "RotaryEmbedding")
        .Doc(
            "Rotary position embedding of x [batch, seq, heads, head_dim] by cos/sin [seq, rotary_dim / 2] "
            "(shared by the batch) or [batch, seq, rotary_dim / 2] (per batch row, e.g. from position ids; "
            "batch 1 broadcasts): pairs (i, i + rotary_dim / 2) (GPT-NeoX / LLaMA) or, interleaved, "
            "(2i, 2i + 1) (GPT-J) are rotated; dims past rotary_dim (partial rotary) pass through.")
        .Inputs({Input("x"), Input("cos"), Input("sin")})
        .Attrs({Attr::Bool("interleaved", false)})
        .Outputs({"y"})
        .Infer(InferRotaryEmbedding)
        .Forward(LaunchRotaryEmbedding)
        // cos and sin are usually fixed tables: their gradients (a reduction
        // over heads, and over batch for a shared table) are computed only when
        // asked for; they have cos's and sin's shapes.
        .Backward(LaunchRotaryEmbeddingBackward)
        .BackwardInputs({GradOfOutput("grad_y", 0).Like(1), SavedInput("x", 0), SavedInput("cos", 1),
                         SavedInput("sin", 2)})
        .BackwardOutputs({Gradient("grad_x").Like(1), Gradient("grad_cos").Like(2).Optional(),
                          Gradient("grad_sin").Like(3).Optional()})
        .InputGradients({0, 1, 2});

}  // namespace opbridge
