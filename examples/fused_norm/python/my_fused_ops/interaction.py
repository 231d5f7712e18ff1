"""pairwise_dot's card: the dot products of every pair of feature vectors
(the feature crossing of recommender models), written with the SDK's
toolkit (csrc/pairwise_dot/kernel.cpp): [B, F, D] -> [B, F * (F - 1) / 2]."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample


def pairwise_dot(features: torch.Tensor) -> torch.Tensor:
    """The dot products of every pair i < j of feature vectors, row-major:
    [B, F, D] -> [B, F * (F - 1) / 2] (float32, float64, float16 or bfloat16)."""
    return torch.ops.myops.pairwise_dot.default(features)


def reference(features):
    """The same math as a model writes it: every product by a batched matrix
    product, then the pairs above the diagonal (the composite torch.compile
    fuses, and the benchmark's baseline)."""
    f = features.shape[1]
    i, j = torch.triu_indices(f, f, offset=1, device=features.device)
    return (features @ features.transpose(1, 2))[:, i, j]


def standard(b, features):
    """Every product (MatMul), then the pairs i < j kept by a mask built from
    F at run time (Range, Less, Compress)."""
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
    yield Sample((x(2, 5, 3),), label="partial vectors")
    yield Sample((x(3, 2, 4),), label="one pair")
    yield Sample((x(2, 9, 17),), label="blocks of four and the rest")
    if large:
        yield Sample((x(8, 40, 64),), label="many pairs")


def bench_inputs(shape, dtype, requires_grad=False):
    """Size [rows, cols] as rows * cols / 1024 batch rows of 32 features of
    32 values (cols below 1024: one batch row of cols / 32 features)."""
    rows, cols = shape
    features = max(2, min(32, cols // 32))
    batch = max(1, rows * cols // (features * 32))
    g = torch.Generator().manual_seed(0)
    x = torch.randn((batch, features, 32), generator=g).to(dtype)
    return (x.requires_grad_(requires_grad),)


CARD = opbridge.ops.register_card(
    Card(
        name="pairwise_dot",
        namespace="myops",
        call=pairwise_dot,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=reference,
    )
)
