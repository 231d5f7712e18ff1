"""A call of an operator as its schema's arguments.

PyTorch hands a kernel, a fake kernel or a decomposition the arguments as
the caller wrote them: some by keyword, and the trailing ones equal to their
defaults often left out. :func:`schema_order` lines them up positionally.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence


def schema_order(
    arguments: Sequence, args: Sequence, kwargs: Mapping, missing: Callable[[str], Exception]
) -> list:
    """``args`` and ``kwargs`` of a call as every argument of ``arguments``
    (a schema's ``torch._C.Argument`` list) in order: the positional ones,
    then each later one from ``kwargs`` by name or its default. An argument
    with neither raises ``missing(name)``, the caller's error for it."""
    values = list(args)
    for argument in arguments[len(values) :]:
        if argument.name in kwargs:
            values.append(kwargs[argument.name])
        elif argument.has_default_value():
            values.append(argument.default_value)
        else:
            raise missing(argument.name)
    return values
