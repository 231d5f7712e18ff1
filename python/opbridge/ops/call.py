"""One call of an operator as a ``torch.nn.Module``: what export, verify and
``route="auto"`` take when they work on one operator alone."""

from __future__ import annotations

from collections.abc import Callable

import torch


class OpCall(torch.nn.Module):
    """The op as a module: tensor arguments are inputs, the rest constants.

    ``OpCall(op, args, kwargs)(*tensors)`` calls ``op`` with ``args`` whose
    tensors (at ``positions``) are replaced by ``tensors``.
    """

    def __init__(self, call: Callable, args: tuple, kwargs: dict):
        super().__init__()
        self.call = call
        self.template = args
        self.kwargs = kwargs
        self.positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def inputs(self) -> tuple:
        """The tensors of the call, in order: what ``forward`` takes."""
        return tuple(self.template[p] for p in self.positions)

    def forward(self, *tensors):
        args = list(self.template)
        for position, tensor in zip(self.positions, tensors, strict=True):
            args[position] = tensor
        return self.call(*args, **self.kwargs)
