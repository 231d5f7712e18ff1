"""Phi-3 decoder layers: Llama's fusion, with the residual dropouts Phi-3
applies to the attention and MLP outputs."""

from __future__ import annotations

from opbridge.patching.families.llama import CORE, RULE, is_decoder_layer
from opbridge.patching.forwards import (
    add_norm,
    children,
    decoder_family,
)

DROPOUTS = {"resid_attn_dropout", "resid_mlp_dropout"}


def after_attention(self, attended, residual):
    if "resid_attn_dropout" in self._modules:
        attended = self.resid_attn_dropout(attended)
    attended, residual = add_norm(self.post_attention_layernorm, attended, residual)
    hidden_states = self.mlp(attended)
    if "resid_mlp_dropout" in self._modules:
        hidden_states = self.resid_mlp_dropout(hidden_states)
    return residual + hidden_states


def _matches(module) -> bool:
    found = children(module)
    return is_decoder_layer(module) and CORE < found <= CORE | DROPOUTS


FAMILY = decoder_family(
    "phi3", RULE, _matches, after_attention, norm_before_mlp="post_attention_layernorm"
)
