"""Phi-3 decoder layers: Llama's fusion, with the residual dropouts Phi-3
applies to the attention and MLP outputs."""

from __future__ import annotations

import functools
from collections.abc import Callable

from opbridge import nn as obnn
from opbridge.patching.families.llama import CORE, RULE, is_decoder_layer
from opbridge.patching.forwards import (
    Family,
    add_norm,
    bound_names,
    children,
    needs,
    probe_rotary_layer,
)

DROPOUTS = {"resid_attn_dropout", "resid_mlp_dropout"}


def forward_of(original: Callable) -> Callable:
    names, defaults = bound_names(original)

    def forward(self, hidden_states, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, **kwargs)[0]
        if "resid_attn_dropout" in self._modules:
            hidden_states = self.resid_attn_dropout(hidden_states)
        hidden_states, residual = add_norm(self.post_attention_layernorm, hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        if "resid_mlp_dropout" in self._modules:
            hidden_states = self.resid_mlp_dropout(hidden_states)
        return residual + hidden_states

    functools.update_wrapper(forward, original)
    return forward


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
    forward=lambda cls: forward_of(cls.forward),
    probe=probe_rotary_layer,
)
