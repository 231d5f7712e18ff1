"""The operators' Python side: the call into torch.ops.opbridge and the
standard-route decomposition. Every module here named after an op in
``opbridge.specs()`` is picked up; nothing else needs registering."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from opbridge._library import specs
from opbridge.ops.add_rms_norm import add_rms_norm
from opbridge.ops.bias_gelu import bias_gelu
from opbridge.ops.normalize_image import normalize_image
from opbridge.ops.rms_norm import rms_norm
from opbridge.ops.rotary_embedding import rotary_embedding
from opbridge.ops.scaled_clamp import scaled_clamp

__all__ = [
    "add_rms_norm",
    "bias_gelu",
    "decomposition",
    "modules",
    "normalize_image",
    "rms_norm",
    "rotary_embedding",
    "scaled_clamp",
]


def modules() -> dict[str, ModuleType]:
    """The Python module of every operator, keyed by op name."""
    found = {}
    for name in specs():
        try:
            found[name] = importlib.import_module(f"opbridge.ops.{name}")
        except ModuleNotFoundError as error:
            raise RuntimeError(
                f"opbridge: operator '{name}' is registered in C++ but has no Python module "
                f"opbridge/ops/{name}.py (its call and standard-route decomposition)"
            ) from error
    return found


def decomposition(name: str) -> Callable:
    """The standard-route decomposition of op ``name``."""
    return modules()[name].standard
