"""rotary_embedding: rotary position embedding (half-split or interleaved)."""

from __future__ import annotations

import torch

from opbridge.ops._builder import Builder


def rotary_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """Rotates pairs of ``x``'s last dimension by the angles whose cosines and
    sines are ``cos`` and ``sin``.

    Layout: ``x`` is ``[batch, seq, heads, head_dim]`` (transpose a
    ``[batch, heads, seq, head_dim]`` tensor first) with an even ``head_dim``;
    ``cos`` and ``sin`` are ``[seq, rotary_dim // 2]``, one row per position of
    ``x`` (slice a longer cache to ``seq``). ``interleaved=False`` pairs
    ``(i, i + rotary_dim // 2)`` (GPT-NeoX / LLaMA ``rotate_half``);
    ``interleaved=True`` pairs ``(2i, 2i + 1)`` (GPT-J). When ``rotary_dim <
    head_dim`` (partial rotary) the last ``head_dim - rotary_dim`` dims pass
    through unchanged. All tensors share one dtype (float32 or float64).
    """
    return torch.ops.opbridge.rotary_embedding.default(x, cos, sin, interleaved)


_INT64_MAX = 2**63 - 1


def standard(b: Builder, x, cos, sin, *, interleaved: int):
    """Slice x into the rotated part and the rest; Mul/Sub/Add with cos and sin
    (Unsqueezed to broadcast over batch and heads); Concat. Interleaved pairs
    are reached by a Reshape to [..., rotary_dim / 2, 2]."""
    half = b.op("Gather", b.op("Shape", cos), b.ints([1]), axis=0)
    rotary = b.op("Mul", half, b.ints([2]))
    last = b.ints([3])
    rotated = b.op("Slice", x, b.ints([0]), rotary, last)
    rest = b.op("Slice", x, rotary, b.ints([_INT64_MAX]), last)
    if interleaved:
        # [b, s, h, rotary] -> [b, s, h, half, 2]; cos/sin -> [s, 1, half, 1].
        pairs = b.op("Reshape", rotated, b.ints([0, 0, 0, -1, 2]))
        axis = b.ints([4])
        first = b.op("Slice", pairs, b.ints([0]), b.ints([1]), axis)
        second = b.op("Slice", pairs, b.ints([1]), b.ints([2]), axis)
        c = b.op("Unsqueeze", cos, b.ints([1, 3]))
        s = b.op("Unsqueeze", sin, b.ints([1, 3]))
        new_first = b.op("Sub", b.op("Mul", first, c), b.op("Mul", second, s))
        new_second = b.op("Add", b.op("Mul", second, c), b.op("Mul", first, s))
        merged = b.op("Concat", new_first, new_second, axis=4)
        out = b.op("Reshape", merged, b.ints([0, 0, 0, -1]))
    else:
        # [b, s, h, half] halves; cos/sin -> [s, 1, half].
        first = b.op("Slice", rotated, b.ints([0]), half, last)
        second = b.op("Slice", rotated, half, rotary, last)
        c = b.op("Unsqueeze", cos, b.ints([1]))
        s = b.op("Unsqueeze", sin, b.ints([1]))
        new_first = b.op("Sub", b.op("Mul", first, c), b.op("Mul", second, s))
        new_second = b.op("Add", b.op("Mul", second, c), b.op("Mul", first, s))
        out = b.op("Concat", new_first, new_second, axis=-1)
    return b.op("Concat", out, rest, axis=-1)
