"""BERT-style post-norm outputs (``BertSelfOutput``, ``BertOutput`` and their
copies): ``LayerNorm(dropout(dense(h)) + input)`` as ``add_layer_norm``."""

from __future__ import annotations

from opbridge import nn as obnn
from opbridge.ops import add_layer_norm
from opbridge.patching.forwards import Family, children, needs, probe_post_norm

CHILDREN = {"dense", "LayerNorm", "dropout"}


def forward(self, hidden_states, input_tensor):
    hidden_states = self.dropout(self.dense(hidden_states))
    norm = self.LayerNorm
    return add_layer_norm(hidden_states, input_tensor, norm.weight, norm.bias, norm.eps)[0]


FAMILY = Family(
    name="bert",
    kind="post_norm",
    rule="residual add + LayerNorm (post-norm output)",
    matches=lambda module: (
        type(module).__name__.endswith("Output") and children(module) == CHILDREN
    ),
    ready=lambda module: needs(module.LayerNorm, "its LayerNorm", obnn.LayerNorm),
    forward=lambda cls: forward,
    probe=probe_post_norm,
)
