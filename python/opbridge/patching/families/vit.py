"""ViT and DeiT layers: the residual add before ``layernorm_after`` as
``add_layer_norm``."""

from __future__ import annotations

from opbridge import nn as obnn
from opbridge.ops import add_layer_norm
from opbridge.patching.forwards import Family, children, needs, probe_layer

CHILDREN = {"attention", "mlp", "layernorm_before", "layernorm_after", "dropout"}


def forward(self, hidden_states, *args, **kwargs):
    residual = hidden_states
    hidden_states = self.attention(self.layernorm_before(hidden_states), *args, **kwargs)[0]
    if "dropout" in self._modules:
        hidden_states = self.dropout(hidden_states)
    norm = self.layernorm_after
    hidden_states, residual = add_layer_norm(
        hidden_states, residual, norm.weight, norm.bias, norm.eps
    )
    hidden_states = self.mlp(hidden_states)
    if "dropout" in self._modules:
        hidden_states = self.dropout(hidden_states)
    return hidden_states + residual


def _matches(module) -> bool:
    found = children(module)
    return (
        type(module).__name__.endswith("Layer") and found <= CHILDREN and "layernorm_after" in found
    )


FAMILY = Family(
    name="vit",
    kind="vit_layer",
    rule="residual add + LayerNorm (ViT layer)",
    matches=_matches,
    ready=lambda module: needs(module.layernorm_after, "its LayerNorm", obnn.LayerNorm),
    forward=lambda cls: forward,
    probe=probe_layer,
)
