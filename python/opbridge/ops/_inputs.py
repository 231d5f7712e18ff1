"""Random inputs for the cards' samples and benchmark inputs."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from opbridge.ops._card import Sample


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

    def large_norm_samples(self, residual: bool = False) -> Iterator[Sample]:
        """A norm's two large samples: a very long row (x [2, 65536] and a
        weight) and many rows (x [4096, 8], a weight and a bias), each x
        followed by a residual of its shape when ``residual``."""
        for shape, bias, label in (
            ((2, 65536), False, "very long row"),
            ((4096, 8), True, "many rows"),
        ):
            args = [self.t(shape)]
            if residual:
                args.append(self.t(shape))
            args.append(self.weight(shape[-1]))
            if bias:
                args.append(self.t((shape[-1],)))
            yield Sample(tuple(args), label=label)


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
