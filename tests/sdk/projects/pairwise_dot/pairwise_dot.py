"""The pairwise_dot operator's card: an output size computed from the input's."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample


def pairwise_dot(features: torch.Tensor) -> torch.Tensor:
    """The dot products of every pair of feature vectors: [B, F, D] -> [B, F * (F - 1) / 2]."""
    return torch.ops.pairwise_dot_ops.pairwise_dot.default(features)


def reference(features):
    """The same math in plain PyTorch."""
    f = features.shape[1]
    i, j = torch.triu_indices(f, f, offset=1)
    return (features @ features.transpose(1, 2))[:, i, j]


def standard(b, features):
    """Standard-route decomposition: every product (MatMul), then the pairs
    i < j kept by a mask built from F at run time (Range, Less, Compress)."""
    products = b.op(
        "Flatten", b.op("MatMul", features, b.op("Transpose", features, perm=[0, 2, 1])), axis=1
    )
    f = b.op("Gather", b.op("Shape", features), b.int_scalar(1), axis=0)
    r = b.op("Range", b.int_scalar(0), f, b.int_scalar(1))
    pairs = b.op("Less", b.op("Unsqueeze", r, b.ints([1])), b.op("Unsqueeze", r, b.ints([0])))
    return b.op("Compress", products, b.op("Reshape", pairs, b.ints([-1])), axis=1)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def x(*shape):
        t = torch.randn(shape, dtype=torch.float64, generator=g)
        return t.to(dtype).requires_grad_(requires_grad)

    yield Sample((x(4, 6, 8),), label="typical")
    yield Sample((x(2, 5, 3),), label="other F")
    yield Sample((x(3, 2, 4),), label="one pair")
    yield Sample((x(1, 9, 16),), label="one row")
    if large:
        yield Sample((x(8, 40, 64),), label="many pairs")


def bench_inputs(shape, dtype, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad),)


CARD = opbridge.ops.register_card(
    Card.of_module(globals(), name="pairwise_dot", namespace="pairwise_dot_ops", call=pairwise_dot)
)
