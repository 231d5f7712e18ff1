"""Phi-3 decoder layers: Llama's fusion, with the residual dropouts Phi-3
applies to the attention and MLP outputs."""

from __future__ import annotations

from opbridge import nn as obnn
from opbridge.patching.families.llama import CORE, RULE, is_decoder_layer
from opbridge.patching.forwards import (
    Family,
    add_norm,
    children,
    decoder_forward,
    needs,
    probe_rotary_layer,
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


FAMILY = Family(
    name="phi3",
    kind="decoder",
    rule=RULE,
    matches=_matches,
    ready=lambda module: needs(
        module.post_attention_layernorm, "its norm before the MLP", obnn.RMSNorm
    ),
    forward=lambda cls: decoder_forward(cls.forward, after_attention),
    probe=probe_rotary_layer,
)
