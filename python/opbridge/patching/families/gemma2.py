"""Gemma 2 and 3 decoder layers: four norms; the residual add is fused with
the pre-feed-forward norm (``add_rms_norm``)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from opbridge import nn as obnn
from opbridge.patching.families.llama import RULE, is_decoder_layer
from opbridge.patching.forwards import (
    Family,
    add_norm,
    bound_names,
    children,
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


def forward_of(original: Callable) -> Callable:
    names, defaults = bound_names(original)

    def forward(self, hidden_states, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, **kwargs)[0]
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, residual = add_norm(self.pre_feedforward_layernorm, hidden_states, residual)
        hidden_states = self.post_feedforward_layernorm(self.mlp(hidden_states))
        return residual + hidden_states

    functools.update_wrapper(forward, original)
    return forward


FAMILY = Family(
    name="gemma2",
    kind="decoder",
    rule=RULE,
    matches=lambda module: is_decoder_layer(module) and children(module) == CHILDREN,
    ready=lambda module: needs(
        module.pre_feedforward_layernorm, "its norm before the MLP", obnn.RMSNorm
    ),
    forward=lambda cls: forward_of(cls.forward),
    probe=probe_rotary_layer,
)
