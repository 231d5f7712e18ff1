"""An operator of another library with its card, registered on import the
way a user's package would do it (``opbridge bench --import user_op_card``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from opbridge.ops import Card, Sample, register_card


@torch.library.custom_op("myops::shifted_relu", mutates_args=())
def shifted_relu(x: torch.Tensor, shift: float) -> torch.Tensor:
    return torch.relu(x + shift)


@shifted_relu.register_fake
def _(x, shift):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (output,) = ctx.saved_tensors
    return grad * (output > 0), None


shifted_relu.register_autograd(_backward, setup_context=_setup_context)


def standard(b, x, *, shift: float):
    """Add + Relu."""
    return b.op("Relu", b.op("Add", x, b.constant(shift, like=x)))


def reference(x, shift):
    return torch.clamp(x + shift, min=0.0)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(shape):
        return (
            torch.randn(shape, generator=g, dtype=torch.float64)
            .to(dtype)
            .requires_grad_(requires_grad)
        )

    yield Sample((t((4, 16)), 0.5), label="typical")
    yield Sample((t((3,)), -1.0), label="1-d, negative shift")
    if large:
        yield Sample((t((512, 1024)), 0.25), label="large")


def bench_inputs(shape, dtype, requires_grad=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    return x.requires_grad_(requires_grad), 0.5


CARD = register_card(
    Card(
        name="shifted_relu",
        namespace="myops",
        call=shifted_relu,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=lambda x, shift: torch.clamp(x + shift, min=0.0),
        builtin=lambda x, shift: F.relu(x + shift),
    )
)
