"""The operators' Python side, one card per operator (:class:`Card`): the
call into ``torch.ops.opbridge``, the standard-route decomposition, the pure
PyTorch reference, sample inputs and the benchmark's inputs and alternatives.

Every card joins by :func:`register_card`, the one registry :func:`card`
and :func:`cards` read: each module here named after an op in
``opbridge.specs()`` registers that op's ``CARD`` when imported (the
catalog imports every one), and an operator of another library registers
its own when that library is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from opbridge._library import specs
from opbridge.ops import catalog
from opbridge.ops._card import (
    Card,
    Layout,
    Sample,
    UnknownOperatorError,
    builtin_module,
    card,
    cards,
    check_card,
    register_card,
)
from opbridge.ops.catalog import *  # noqa: F403 (every operator's call)
from opbridge.ops.sharding import install as _install_sharding

__all__ = [
    "Card",
    "Layout",
    "Sample",
    "UnknownOperatorError",
    "card",
    "cards",
    "check_card",
    "decomposition",
    "modules",
    "register_card",
]
__all__ += catalog.__all__


def modules() -> dict[str, ModuleType]:
    """The Python module of every built-in operator, keyed by op name."""
    return {name: builtin_module(name) for name in specs()}


def decomposition(name: str) -> Callable:
    """The standard-route decomposition of op ``name`` (bare or qualified)."""
    found = card(name)
    if found.standard is None:
        raise RuntimeError(
            f"opbridge: operator {found.qualified_name} has no standard-route decomposition "
            f"(its card in {found.origin or '?'} has standard=None)"
        )
    return found.standard


# DTensor sharding strategies from the cards' layouts, once torch.distributed.tensor is
# imported: the third of the import-time effects the package's docstring lists.
_install_sharding()
