"""The standard-route decomposition of every library's operator, read from
its card (the one registry of an operator's forms: :func:`opbridge.ops.card`,
:func:`opbridge.ops.register_card`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbridge._library import Library


def card_of(library: Library, spec: dict) -> Any:
    """The op's card (:func:`opbridge.ops.card`), or None when it has none."""
    from opbridge.ops import UnknownOperatorError, card

    try:
        return card(f"{library.torch_namespace}::{spec['name']}")
    except UnknownOperatorError:
        return None


def standard_form(library: Library, spec: dict) -> Callable:
    """The op's standard-route decomposition: its card's ``standard``, or a
    form that raises the error naming the op when it has none."""
    found = card_of(library, spec)
    if found is not None and found.standard is not None:
        return found.standard
    qualified = f"{library.torch_namespace}::{spec['name']}"

    def missing(*_args, **_kwargs):
        raise NotImplementedError(
            f"{qualified} has no standard-route decomposition: give its card one "
            "(opbridge.ops.register_card(Card(..., standard=fn))), or export with "
            "route='custom'"
        )

    return missing
