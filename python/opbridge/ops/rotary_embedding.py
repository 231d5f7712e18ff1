"""rotary_embedding: rotary position embedding (half-split or interleaved)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from opbridge.ops._card import Card, Layout, Sample, register_card
from opbridge.ops._inputs import SampleTensors, bench_generator, bench_randn, with_grad

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


def rotary_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """Rotates pairs of ``x``'s last dimension by the angles whose cosines and
    sines are ``cos`` and ``sin``.

    Layout: ``x`` is ``[batch, seq, heads, head_dim]`` (transpose a
    ``[batch, heads, seq, head_dim]`` tensor first) with an even ``head_dim``;
    ``cos`` and ``sin`` are ``[seq, rotary_dim // 2]``, one row per position of
    ``x`` shared by the batch (slice a longer cache to ``seq``), or
    ``[batch, seq, rotary_dim // 2]``, one table per batch row for positions
    that differ per row (a left-padded batch; Hugging Face's cos/sin from
    ``position_ids``, first half of their last dimension); a 3-D table with a
    batch of 1 broadcasts. ``cos`` and ``sin`` have the same shape.
    ``interleaved=False`` pairs
    ``(i, i + rotary_dim // 2)`` (GPT-NeoX / LLaMA ``rotate_half``);
    ``interleaved=True`` pairs ``(2i, 2i + 1)`` (GPT-J). When ``rotary_dim <
    head_dim`` (partial rotary) the last ``head_dim - rotary_dim`` dims pass
    through unchanged. All tensors share one dtype (float32, float64, float16 or
    bfloat16; 16-bit computed in float32).
    """
    return torch.ops.opbridge.rotary_embedding.default(x, cos, sin, interleaved)


_INT64_MAX = 2**63 - 1


# ONNX added RotaryEmbedding in opset 23.
ROTARY_EMBEDDING_OPSET = 23


def _fused_layout(b: Builder, x, cos):
    """``(heads, half, table_rank)`` when x and cos have what the fused
    RotaryEmbedding operators need at export time (float32, 4-D x with a
    static heads dimension, a 2-D or 3-D table with a static last
    dimension), else None."""
    x_shape, cos_shape = b.shape(x), b.shape(cos)
    if b.float_dtype(x) != "float32" or x_shape is None or cos_shape is None:
        return None
    if len(x_shape) != 4 or len(cos_shape) not in (2, 3):
        return None
    heads, half = x_shape[2], cos_shape[-1]
    if heads is None or half is None:
        return None
    return heads, half, len(cos_shape)


def _per_row_tables(b: Builder, x, cos, sin, half: int):
    """cos/sin expanded to x's ``[batch, seq, half]`` (a 2-D table or a 3-D
    one of batch 1 is shared by the batch)."""
    size = b.op(
        "Concat", b.op("Slice", b.op("Shape", x), b.ints([0]), b.ints([2])), b.ints([half]), axis=0
    )
    return b.op("Expand", cos, size), b.op("Expand", sin, size)


def standard(b: Builder, x, cos, sin, *, interleaved: int):
    """ONNX's RotaryEmbedding from opset 23 (float32 with a static heads
    dimension and table width; x seen as 3-D ``[batch, seq, heads *
    head_dim]`` with ``num_heads``, the tables expanded to ``[batch, seq,
    half]``); else, or where the export avoids RotaryEmbedding, the
    Slice/Mul/Sub/Add/Concat chain."""
    fused = b.opset >= ROTARY_EMBEDDING_OPSET and b.allows("RotaryEmbedding")
    layout = _fused_layout(b, x, cos) if fused else None
    if layout is None:
        return _chain(b, x, cos, sin, interleaved=interleaved)
    heads, half, _ = layout
    c, s = _per_row_tables(b, x, cos, sin, half)
    y = b.op(
        "RotaryEmbedding",
        b.op("Reshape", x, b.ints([0, 0, -1])),
        c,
        s,
        interleaved=int(interleaved),
        num_heads=heads,
        rotary_embedding_dim=2 * half,
    )
    return b.op("Reshape", y, b.op("Shape", x))


def ort(b: Builder, x, cos, sin, *, interleaved: int):
    """ONNX Runtime's com.microsoft RotaryEmbedding (layout conditions as the
    standard form's at opset 23). A shared ``[seq, half]`` table (or a 3-D one
    of static batch 1) is its cache with position ids starting at 0; per-row
    tables are expanded to x's batch and flattened to ``[batch * seq, half]``,
    row ``r``'s position ``p`` reading entry ``r * seq + p``. Else, or where
    the export avoids com.microsoft RotaryEmbedding, the standard form."""
    layout = _fused_layout(b, x, cos) if b.allows("RotaryEmbedding", "com.microsoft") else None
    if layout is None:
        return standard(b, x, cos, sin, interleaved=interleaved)
    heads, half, rank = layout
    if rank == 2 or b.shape(cos)[0] == 1:
        table_shape = b.ints([-1, half])
        cos, sin = b.op("Reshape", cos, table_shape), b.op("Reshape", sin, table_shape)
        positions = b.ints([0])
    else:
        c, s = _per_row_tables(b, x, cos, sin, half)
        table_shape = b.ints([-1, half])
        cos, sin = b.op("Reshape", c, table_shape), b.op("Reshape", s, table_shape)
        batch_seq = b.op("Slice", b.op("Shape", x), b.ints([0]), b.ints([2]))
        count = b.op("ReduceProd", batch_seq, keepdims=0)
        steps = b.op("Range", b.int_scalar(0), count, b.int_scalar(1))
        positions = b.op("Reshape", steps, batch_seq)
    y = b.contrib(
        "RotaryEmbedding",
        b.op("Reshape", x, b.ints([0, 0, -1])),
        positions,
        cos,
        sin,
        interleaved=int(interleaved),
        num_heads=heads,
        rotary_embedding_dim=2 * half,
        scale=1.0,
    )
    return b.op("Reshape", y, b.op("Shape", x))


def _chain(b: Builder, x, cos, sin, *, interleaved: int):
    """Slice x into the rotated part and the rest; Mul/Sub/Add with cos and sin
    (Unsqueezed to broadcast over heads, and over batch when 2-D); Concat.
    Interleaved pairs are reached by a Reshape to [..., rotary_dim / 2, 2].

    cos/sin are [seq, half] or [batch, seq, half]: their axes are counted from
    the end, so one graph serves both ranks (broadcasting lines a 2-D table up
    with x's seq axis, a 3-D one with x's batch and seq axes)."""
    half = b.op("Gather", b.op("Shape", cos), b.ints([-1]), axis=0)
    rotary = b.op("Mul", half, b.ints([2]))
    last = b.ints([3])
    rotated = b.op("Slice", x, b.ints([0]), rotary, last)
    rest = b.op("Slice", x, rotary, b.ints([_INT64_MAX]), last)
    if interleaved:
        # [b, s, h, rotary] -> [b, s, h, half, 2]; cos/sin -> [(b,) s, 1, half, 1].
        pairs = b.op("Reshape", rotated, b.ints([0, 0, 0, -1, 2]))
        axis = b.ints([4])
        first = b.op("Slice", pairs, b.ints([0]), b.ints([1]), axis)
        second = b.op("Slice", pairs, b.ints([1]), b.ints([2]), axis)
        # One negative axis per Unsqueeze: the legacy exporter's constant
        # folding misplaces several negative axes in one node.
        c = b.op("Unsqueeze", b.op("Unsqueeze", cos, b.ints([-2])), b.ints([-1]))
        s = b.op("Unsqueeze", b.op("Unsqueeze", sin, b.ints([-2])), b.ints([-1]))
        new_first = b.op("Sub", b.op("Mul", first, c), b.op("Mul", second, s))
        new_second = b.op("Add", b.op("Mul", second, c), b.op("Mul", first, s))
        merged = b.op("Concat", new_first, new_second, axis=4)
        out = b.op("Reshape", merged, b.ints([0, 0, 0, -1]))
    else:
        # [b, s, h, half] halves; cos/sin -> [(b,) s, 1, half].
        first = b.op("Slice", rotated, b.ints([0]), half, last)
        second = b.op("Slice", rotated, half, rotary, last)
        c = b.op("Unsqueeze", cos, b.ints([-2]))
        s = b.op("Unsqueeze", sin, b.ints([-2]))
        new_first = b.op("Sub", b.op("Mul", first, c), b.op("Mul", second, s))
        new_second = b.op("Add", b.op("Mul", second, c), b.op("Mul", first, s))
        out = b.op("Concat", new_first, new_second, axis=-1)
    return b.op("Concat", out, rest, axis=-1)


def _per_head(table):
    """``[seq, half]`` or ``[batch, seq, half]`` -> broadcastable against
    ``[batch, seq, heads, half]``."""
    return table.unsqueeze(-2) if table.dim() == 3 else table[None, :, None, :]


def reference(x, cos, sin, interleaved=False):
    half = cos.shape[-1]
    rotated, rest = x[..., : 2 * half], x[..., 2 * half :]
    c, s = _per_head(cos), _per_head(sin)
    if interleaved:
        a, b = rotated[..., 0::2], rotated[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    else:
        a, b = rotated[..., :half], rotated[..., half:]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    return torch.cat([out, rest], dim=-1)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t, g = tensors.t, tensors.generator

    def tables(seq, half):
        angles = torch.rand((seq, half), dtype=torch.float64, generator=g) * 6.3
        return (
            angles.cos().to(dtype).requires_grad_(requires_grad),
            angles.sin().to(dtype).requires_grad_(requires_grad),
        )

    def row_tables(batch, seq, half):
        """Per-batch-row tables [batch, seq, half] of independent angles."""
        angles = torch.rand((batch, seq, half), dtype=torch.float64, generator=g) * 6.3
        return (
            angles.cos().to(dtype).requires_grad_(requires_grad),
            angles.sin().to(dtype).requires_grad_(requires_grad),
        )

    yield Sample((t((1, 1, 1, 2)), *tables(1, 1)), label="one pair")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 4)), label="typical, half-split")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 4), True), label="typical, interleaved")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 2)), label="partial rotary, half-split")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 3), True), label="partial rotary, interleaved")
    yield Sample((t((1, 1, 1, 2)), *tables(1, 1), True), label="1x1, interleaved")
    yield Sample((t((2, 5, 3, 8)), *row_tables(2, 5, 4)), label="typical, per-batch tables")
    yield Sample(
        (t((2, 5, 3, 8)), *row_tables(2, 5, 3), True),
        label="typical, per-batch tables, partial rotary, interleaved",
    )
    yield Sample(
        (t((3, 6, 2, 8)), *left_padded_tables((0, 2, 5), 6, 4, dtype, requires_grad)),
        label="typical, left-padded batch (positions per row)",
    )
    yield Sample(
        (t((3, 5, 2, 8)), *row_tables(1, 5, 4)), label="typical, per-batch tables of batch 1"
    )
    yield Sample((t((1, 1, 1, 2)), *row_tables(1, 1, 1), True), label="one pair, per-batch tables")
    # [seq, batch, half] storage seen as [batch, seq, half].
    c, sn = (
        table.detach().transpose(0, 1).requires_grad_(requires_grad)
        for table in row_tables(5, 2, 4)
    )
    yield Sample((t((2, 5, 3, 8)), c, sn), label="non-contiguous per-batch tables")
    # [batch, heads, seq, head_dim] storage seen as [batch, seq, heads, head_dim].
    noncontig = t((2, 3, 5, 8)).detach().transpose(1, 2)
    yield Sample((noncontig.requires_grad_(requires_grad), *tables(5, 4)), label="non-contiguous")
    if large:
        yield Sample((t((1, 2, 2, 16384)), *tables(2, 8192)), label="very long head")
        yield Sample((t((64, 64, 2, 4)), *tables(64, 2), True), label="many rows")


def position_ids(pads, seq):
    """Hugging Face's position ids of a left-padded batch: row ``r`` starts
    with ``pads[r]`` padding tokens; real tokens count from 0, padding gets 1
    (``cumsum(mask) - 1``, then ``masked_fill(mask == 0, 1)``)."""
    mask = torch.ones((len(pads), seq), dtype=torch.int64)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def tables_from_positions(positions, half, dtype, base=10000.0):
    """cos/sin ``[batch, seq, half]`` of ``positions`` ``[batch, seq]``:
    angle ``position * base ** (-i / half)``."""
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = positions.to(torch.float64)[..., None] * inv_freq
    return angles.cos().to(dtype), angles.sin().to(dtype)


def left_padded_tables(pads, seq, half, dtype=torch.float32, requires_grad=False):
    cos, sin = tables_from_positions(position_ids(pads, seq), half, dtype)
    return cos.requires_grad_(requires_grad), sin.requires_grad_(requires_grad)


BENCH_HEAD_DIM = 128


def bench_inputs(shape, dtype, requires_grad=False):
    """``[rows, cols]`` becomes x ``[1, rows, cols / 128, 128]`` with cos/sin
    ``[rows, 64]``; half-split, the whole head rotated."""
    rows, cols = shape
    g = bench_generator()
    x = bench_randn((1, rows, max(1, cols // BENCH_HEAD_DIM), BENCH_HEAD_DIM), dtype, g)
    cos = bench_randn((rows, BENCH_HEAD_DIM // 2), dtype, g)
    sin = bench_randn((rows, BENCH_HEAD_DIM // 2), dtype, g)
    return with_grad((x, cos, sin), requires_grad)


def composite(x, cos, sin, interleaved=False):
    """``rotate_half`` as models write it: the whole head, half-split (other
    cases fall back to the reference's slicing)."""
    if interleaved or 2 * cos.shape[-1] != x.shape[-1]:
        return reference(x, cos, sin, interleaved)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = _per_head(cos), _per_head(sin)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


CARD = Card.of_module(
    globals(),
    # x [batch, seq, heads, head_dim]; cos/sin [seq, half] or [batch, seq, half]
    # (batch 1 broadcasts). head_dim and half are rotated: whole.
    name="rotary_embedding",
    call=rotary_embedding,
    layout=Layout(
        {"x": "bshk", "cos": ("sr", "bsr"), "sin": ("sr", "bsr"), "y": "bshk"}, whole="kr"
    ),
)
register_card(CARD)
