"""Gemma 2 and 3 decoder layers: four norms; the residual add is fused with
the pre-feed-forward norm (``add_rms_norm``)."""

from __future__ import annotations

from opbridge import nn as obnn
from opbridge.patching.families.llama import RULE, is_decoder_layer
from opbridge.patching.forwards import (
    Family,
    add_norm,
    children,
    decoder_forward,
    needs,
    probe_rotary_layer,
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


FAMILY = Family(
    name="gemma2",
    kind="decoder",
    rule=RULE,
    matches=lambda module: is_decoder_layer(module) and children(module) == CHILDREN,
    ready=lambda module: needs(
        module.pre_feedforward_layernorm, "its norm before the MLP", obnn.RMSNorm
    ),
    forward=lambda cls: decoder_forward(cls.forward, after_attention),
    probe=probe_rotary_layer,
)
