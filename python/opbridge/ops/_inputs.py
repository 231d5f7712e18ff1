"""Random inputs for the cards' samples and benchmark inputs."""

from __future__ import annotations

import torch


def make(shape, dtype, requires_grad, generator, scale=1.0) -> torch.Tensor:
    """``scale * randn(shape)`` drawn in float64 (so every dtype sees the same
    values, rounded), as ``dtype``."""
    t = scale * torch.randn(shape, dtype=torch.float64, generator=generator)
    return t.to(dtype).requires_grad_(requires_grad)


class SampleTensors:
    """The tensors of one ``samples()`` call, drawn in order from one
    generator seeded with ``seed`` (:func:`make`'s values): ``t(shape,
    scale)`` a tensor, ``weight(n)`` a weight near 1. Each requires grad when
    asked; ``generator`` is there for a sample's own draws."""

    def __init__(self, dtype, requires_grad: bool, seed: int):
        self.dtype = dtype
        self.requires_grad = requires_grad
        self.generator = torch.Generator().manual_seed(seed)

    def t(self, shape, scale=1.0) -> torch.Tensor:
        return make(shape, self.dtype, self.requires_grad, self.generator, scale)

    def weight(self, n: int) -> torch.Tensor:
        w = 1 + 0.1 * make((n,), self.dtype, False, self.generator)
        return w.detach().requires_grad_(self.requires_grad)


def bench_randn(shape, dtype, generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)


def bench_weight(cols, dtype, generator) -> torch.Tensor:
    return (1 + 0.1 * torch.randn(cols, generator=generator)).to(dtype)


def bench_generator() -> torch.Generator:
    """The benchmark's inputs are the same on every call."""
    return torch.Generator().manual_seed(0)


def with_grad(args: tuple, requires_grad: bool) -> tuple:
    """``args`` with every floating tensor requiring grad when asked."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a.requires_grad_(requires_grad)
    return args
