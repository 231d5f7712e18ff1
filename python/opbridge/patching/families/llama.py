"""Llama-style decoder layers (Llama, Mistral, Qwen2, Qwen3, Gemma): the
residual add + RMS norm between attention and MLP as ``add_rms_norm``."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch import nn

from opbridge import nn as obnn
from opbridge.patching.forwards import (
    Family,
    add_norm,
    bound_names,
    children,
    needs,
    probe_rotary_layer,
)

CORE = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}
RULE = "residual add + RMSNorm (decoder layer)"


def is_decoder_layer(module: nn.Module) -> bool:
    return type(module).__name__.endswith("DecoderLayer")


def forward_of(original: Callable) -> Callable:
    names, defaults = bound_names(original)

    def forward(self, hidden_states, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, **kwargs)[0]
        hidden_states, residual = add_norm(self.post_attention_layernorm, hidden_states, residual)
        return residual + self.mlp(hidden_states)

    functools.update_wrapper(forward, original)
    return forward


FAMILY = Family(
    name="llama",
    kind="decoder",
    rule=RULE,
    matches=lambda module: is_decoder_layer(module) and children(module) == CORE,
    ready=lambda module: needs(
        module.post_attention_layernorm, "its norm before the MLP", obnn.RMSNorm
    ),
    forward=lambda cls: forward_of(cls.forward),
    probe=probe_rotary_layer,
)
