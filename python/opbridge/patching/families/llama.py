"""Llama-style decoder layers (Llama, Mistral, Qwen2, Qwen3, Gemma): the
residual add + RMS norm between attention and MLP as ``add_rms_norm``."""

from __future__ import annotations

from torch import nn

from opbridge.patching.forwards import (
    add_norm,
    children,
    decoder_family,
)

CORE = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}
RULE = "residual add + RMSNorm (decoder layer)"


def is_decoder_layer(module: nn.Module) -> bool:
    return type(module).__name__.endswith("DecoderLayer")


def after_attention(self, attended, residual):
    attended, residual = add_norm(self.post_attention_layernorm, attended, residual)
    return residual + self.mlp(attended)


FAMILY = decoder_family(
    "llama",
    RULE,
    lambda module: is_decoder_layer(module) and children(module) == CORE,
    after_attention,
    norm_before_mlp="post_attention_layernorm",
)
