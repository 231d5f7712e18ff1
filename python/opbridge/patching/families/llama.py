"""Llama-style decoder layers (Llama, Mistral, Qwen2, Qwen3, Gemma): the
residual add + RMS norm between attention and MLP as ``add_rms_norm``."""

from __future__ import annotations

from torch import nn

from opbridge import nn as obnn
from opbridge.patching.forwards import (
    Family,
    add_norm,
    children,
    decoder_forward,
    needs,
    probe_rotary_layer,
)

CORE = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}
RULE = "residual add + RMSNorm (decoder layer)"


def is_decoder_layer(module: nn.Module) -> bool:
    return type(module).__name__.endswith("DecoderLayer")


def after_attention(self, attended, residual):
    attended, residual = add_norm(self.post_attention_layernorm, attended, residual)
    return residual + self.mlp(attended)


FAMILY = Family(
    name="llama",
    kind="decoder",
    rule=RULE,
    matches=lambda module: is_decoder_layer(module) and children(module) == CORE,
    ready=lambda module: needs(
        module.post_attention_layernorm, "its norm before the MLP", obnn.RMSNorm
    ),
    forward=lambda cls: decoder_forward(cls.forward, after_attention),
    probe=probe_rotary_layer,
)
