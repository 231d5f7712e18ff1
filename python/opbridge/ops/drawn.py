"""Samples and benchmark inputs drawn from an operator's schema, for a card
that has none (an operator opbridge did not build, :mod:`opbridge.ops.adopted`).

Each scalar argument takes its default. The tensor arguments take one of two
layouts, the first the operator accepts and computes as its reference does:
every tensor of one shape (an elementwise operator), or the first of shape
``[..., n]`` and the others ``[n]`` (a normalization's weight and bias). An
optional tensor is absent in most samples and present in one. An operator
neither layout fits (a scalar argument without a default, tensors of other
shapes, an output its reference does not match) gets a
:class:`SampleDrawError` that says what was tried: its card then needs
samples of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from opbridge.ops._sample import Sample

# The layouts tried, in order: the shape of tensor argument 0 is the sample's
# shape; the others take it ("same") or its last dimension ("last").
LAYOUTS = ("same", "last")
_ATOL, _RTOL = 1e-4, 1e-4


class SampleDrawError(ValueError):
    """No samples could be drawn from the operator's schema."""


def _arguments(op) -> list:
    return list(op._schema.arguments)


def _is_tensor(argument) -> bool:
    return str(argument.type) in ("Tensor", "Optional[Tensor]", "Tensor?")


def _is_optional(argument) -> bool:
    return str(argument.type) != "Tensor"


class _Drawer:
    """Draws calls of ``op`` (``card.call``, checked against
    ``card.reference``) in the first layout that fits."""

    def __init__(self, card):
        self.card = card
        self.qualified = card.qualified_name

    @functools.cached_property
    def op(self):
        namespace, _, name = self.qualified.partition("::")
        return getattr(getattr(torch.ops, namespace), name).default

    def _scalars_have_defaults(self) -> None:
        missing = [
            a.name for a in _arguments(self.op) if not _is_tensor(a) and not a.has_default_value()
        ]
        if missing:
            raise SampleDrawError(
                f"{self.qualified}: no samples can be drawn from its schema ({self.op._schema}): "
                f"argument(s) {', '.join(missing)} have no default; give its card samples and "
                "bench_inputs"
            )

    def call(self, layout: str, shape, dtype, requires_grad, generator, present=()) -> tuple:
        """The arguments of one call: tensors of ``shape`` in ``layout``,
        optional tensors absent unless named in ``present``, scalars at their
        defaults."""
        args: list[Any] = []
        first = True
        for argument in _arguments(self.op):
            if not _is_tensor(argument):
                args.append(argument.default_value)
                continue
            if _is_optional(argument) and argument.name not in present:
                args.append(None)
                continue
            dims = list(shape) if first or layout == "same" else [list(shape)[-1]]
            first = False
            value = torch.randn(dims, dtype=torch.float64, generator=generator).to(dtype)
            args.append(value.requires_grad_(requires_grad))
        while args and args[-1] is None:
            args.pop()
        return tuple(args)

    @functools.cached_property
    def layout(self) -> str:
        """The first layout in which the call runs and matches the reference."""
        self._scalars_have_defaults()
        tried = []
        for layout in LAYOUTS:
            args = self.call(layout, (3, 8), torch.float32, False, torch.Generator().manual_seed(0))
            try:
                with torch.no_grad():
                    got = self.card.call(*args)
                    want = self.card.reference(*args)
                got, want = _as_tuple(got), _as_tuple(want)
                if len(got) != len(want) or not all(
                    torch.allclose(g, w, atol=_ATOL, rtol=_RTOL)
                    for g, w in zip(got, want, strict=True)
                ):
                    tried.append(f"{layout}: the call and its reference disagree")
                    continue
            except Exception as error:  # the op refused the layout
                tried.append(f"{layout}: {type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            return layout
        raise SampleDrawError(
            f"{self.qualified}: no samples can be drawn from its schema ({self.op._schema}); "
            f"tried {'; '.join(tried)} (layouts: 'same' = every tensor of one shape, 'last' = "
            "the others of the first's last dimension); give its card samples and bench_inputs"
        )

    def optional_names(self) -> list[str]:
        return [a.name for a in _arguments(self.op) if _is_tensor(a) and _is_optional(a)]

    def samples(
        self, dtype=torch.float32, requires_grad=False, *, large=True, seed=0
    ) -> Iterator[Sample]:
        layout = self.layout
        g = torch.Generator().manual_seed(seed)
        optional = self.optional_names()
        yield Sample(self.call(layout, (4, 16), dtype, requires_grad, g), label="typical")
        if optional:
            args = self.call(layout, (4, 16), dtype, requires_grad, g, present=optional)
            yield Sample(args, label="optional inputs given")
        yield Sample(self.call(layout, (1, 1), dtype, requires_grad, g), label="one element")
        yield Sample(self.call(layout, (2, 3, 5), dtype, requires_grad, g), label="3-d")
        yield Sample(self.call(layout, (3, 7), dtype, requires_grad, g), label="odd width")
        if large:
            yield Sample(self.call(layout, (2, 70000), dtype, requires_grad, g), label="long row")

    def bench_inputs(self, shape, dtype, requires_grad=False) -> tuple:
        g = torch.Generator().manual_seed(0)
        return self.call(self.layout, list(shape), dtype, requires_grad, g)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def drawn(card) -> tuple[Callable[..., Iterator[Sample]], Callable[..., tuple]]:
    """``(samples, bench_inputs)`` for ``card``, drawn from its operator's
    schema when first called (a :class:`SampleDrawError` then if neither
    layout fits; see the module's documentation)."""
    drawer = _Drawer(card)

    def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
        return drawer.samples(dtype, requires_grad, large=large, seed=seed)

    def bench_inputs(shape, dtype, requires_grad=False):
        return drawer.bench_inputs(shape, dtype, requires_grad)

    samples.drawn = bench_inputs.drawn = True
    samples.__doc__ = f"Samples of {card.qualified_name}, drawn from its schema."
    bench_inputs.__doc__ = f"Benchmark inputs of {card.qualified_name}, drawn from its schema."
    return samples, bench_inputs
