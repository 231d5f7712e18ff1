"""timm's ``Block`` (ViT, DeiT, EVA, ...): the residual add before ``norm2``
as ``add_layer_norm`` or ``add_rms_norm``."""

from __future__ import annotations

import functools
from collections.abc import Callable

from opbridge import nn as obnn
from opbridge.patching.forwards import Family, add_norm, bound_names, children, needs, probe_layer

CHILDREN = {"norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2"}


def forward_of(original: Callable) -> Callable:
    names, defaults = bound_names(original)

    def forward(self, x, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        h = self.drop_path1(self.ls1(self.attn(self.norm1(x), **kwargs)))
        normed, x = add_norm(self.norm2, h, x)
        return x + self.drop_path2(self.ls2(self.mlp(normed)))

    functools.update_wrapper(forward, original)
    return forward


FAMILY = Family(
    name="timm",
    kind="timm_block",
    rule="residual add + norm (timm Block)",
    matches=lambda module: children(module) == CHILDREN,
    ready=lambda module: needs(module.norm2, "its norm2", obnn.LayerNorm, obnn.RMSNorm),
    forward=lambda cls: forward_of(cls.forward),
    probe=probe_layer,
)
