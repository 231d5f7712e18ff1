"""Gemma 2 and 3 decoder layers: four norms; the residual add is fused with
the pre-feed-forward norm (``add_rms_norm``)."""

from __future__ import annotations

from opbridge.patching.families.llama import RULE, is_decoder_layer
from opbridge.patching.forwards import (
    add_norm,
    children,
    decoder_family,
)

CHILDREN = {
    "input_layernorm",
    "self_attn",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
    "mlp",
}


def after_attention(self, attended, residual):
    attended = self.post_attention_layernorm(attended)
    attended, residual = add_norm(self.pre_feedforward_layernorm, attended, residual)
    return residual + self.post_feedforward_layernorm(self.mlp(attended))


FAMILY = decoder_family(
    "gemma2",
    RULE,
    lambda module: is_decoder_layer(module) and children(module) == CHILDREN,
    after_attention,
    norm_before_mlp="pre_feedforward_layernorm",
)
