"""The calls a model makes of the loaded libraries' operators, seen while it
runs: a ``TorchDispatchMode`` that hands each call of an operator in a
library's torch namespace (``torch.ops.<namespace>.<op>``, however it was
reached: ``opbridge.rms_norm(...)``, an ``opbridge.nn`` module, a direct
``torch.ops`` call) to a callback.

:func:`record_calls` keeps the distinct calls (what ``route="auto"``
measures); :mod:`opbridge.verify` keeps every call's output, to compare it
with the call's node in the exported graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opbridge._library import libraries

# on_call(op, args, kwargs, output): op is "<namespace>::<name>"; the
# arguments and the output are the call's own tensors (detach and clone to keep).
OnCall = Callable[[str, tuple, dict, Any], None]


@dataclass
class Call:
    """One distinct call of an operator in the model, and how often it is made."""

    op: str  # "<namespace>::<name>"
    args: tuple
    kwargs: dict
    count: int = 1

    def signature(self) -> str:
        def text(value):
            if isinstance(value, torch.Tensor):
                return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
            return repr(value)

        parts = [text(a) for a in self.args] + [f"{k}={text(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"


def library_namespaces() -> set[str]:
    """The torch namespaces of every loaded operator library and of every
    adopted operator (:mod:`opbridge.ops.adopted`)."""
    from opbridge.ops.adopted import adopted

    return {lib.torch_namespace for lib in [*libraries(), *adopted()]}


class CallRecorder(TorchDispatchMode):
    """While active, hands each call of an operator in ``namespaces``
    (default: every loaded library's) to ``on_call`` after the operator ran.
    A call an operator makes of another from inside its kernel is not seen:
    the mode is off while an operator runs."""

    def __init__(self, on_call: OnCall, namespaces: Iterable[str] | None = None):
        super().__init__()
        self.on_call = on_call
        self.namespaces = set(library_namespaces() if namespaces is None else namespaces)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        namespace = getattr(func, "namespace", "")
        if namespace in self.namespaces:
            op = f"{namespace}::{func._schema.name.split('::')[-1]}"
            self.on_call(op, args, kwargs, output)
        return output


def detached(value):
    """``value`` with every tensor in it detached and cloned."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return type(value)(detached(v) for v in value)
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    return value


def record_calls(
    model: torch.nn.Module, args: tuple, namespaces: Iterable[str] | None = None
) -> dict[str, list[Call]]:
    """The distinct calls of every loaded library's operators (or those in
    the torch ``namespaces`` given) that ``model(*args)`` makes, by operator
    (in the order first called)."""
    calls: dict[tuple, Call] = {}

    def on_call(op: str, call_args: tuple, call_kwargs: dict, _output) -> None:
        call = Call(op, detached(call_args), detached(call_kwargs))
        key = (op, call.signature())
        if key in calls:
            calls[key].count += 1
        else:
            calls[key] = call

    with torch.no_grad(), CallRecorder(on_call, namespaces):
        model(*args)
    by_op: dict[str, list[Call]] = {}
    for call in calls.values():
        by_op.setdefault(call.op, []).append(call)
    return by_op
