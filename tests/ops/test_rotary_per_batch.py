"""rotary_embedding with per-batch-row cos/sin [batch, seq, rotary_dim / 2]:
positions that differ per row (a left-padded batch, Hugging Face's cos/sin
from position_ids), in PyTorch and exported by both routes to ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import opbridge
from opbridge.ops import builtin_module

from ort_helpers import LEVELS, run

card_module = builtin_module("rotary_embedding")
REFERENCE = card_module.reference


def _hf_cos_sin(position_ids, dim, base=10000.0, dtype=torch.float32):
    """Hugging Face's LlamaRotaryEmbedding: [b, s, dim] cos/sin, both halves
    of the last dimension equal."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = position_ids[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _hf_apply(q, k, cos, sin):
    """The rotate-half formula as Hugging Face models apply it, written from
    its definition: q/k in [b, s, heads, d], cos/sin [b, s, d] per row."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_hugging_face_left_padded_batch(dtype):
    batch, seq, heads, kv_heads, head_dim = 3, 7, 4, 2, 16
    pads = (0, 3, 6)
    position_ids = card_module.position_ids(pads, seq)
    assert position_ids[1].tolist() == [1, 1, 1, 0, 1, 2, 3]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, seq, heads, head_dim, generator=g, dtype=dtype)
    k = torch.randn(batch, seq, kv_heads, head_dim, generator=g, dtype=dtype)
    cos_full, sin_full = _hf_cos_sin(position_ids, head_dim, dtype=dtype)
    cos, sin = cos_full[..., : head_dim // 2], sin_full[..., : head_dim // 2]
    assert cos.shape == (batch, seq, head_dim // 2)

    q_out = opbridge.rotary_embedding(q, cos, sin)
    k_out = opbridge.rotary_embedding(k, cos, sin)
    # One 2-D call per row: the same kernel arithmetic, so the same bits.
    for row in range(batch):
        for x, out in ((q, q_out), (k, k_out)):
            torch.testing.assert_close(
                out[row : row + 1],
                opbridge.rotary_embedding(x[row : row + 1], cos[row], sin[row]),
                atol=0,
                rtol=0,
            )
    torch.testing.assert_close(q_out, REFERENCE(q, cos, sin))
    torch.testing.assert_close(k_out, REFERENCE(k, cos, sin))
    q_hf, k_hf = _hf_apply(q, k, cos_full, sin_full)
    torch.testing.assert_close(q_out, q_hf)
    torch.testing.assert_close(k_out, k_hf)


def test_per_batch_gradients_equal_the_per_row_calls():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    cos, sin = card_module.left_padded_tables((0, 1, 4), 5, 4, torch.float64, requires_grad=True)
    grad_y = torch.randn(3, 5, 2, 8, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(opbridge.rotary_embedding(x, cos, sin), (x, cos, sin), grad_y)
    assert got[1].shape == cos.shape and got[2].shape == sin.shape
    for row in range(3):
        xr = x[row : row + 1].detach().requires_grad_()
        cr = cos[row].detach().requires_grad_()
        sr = sin[row].detach().requires_grad_()
        want = torch.autograd.grad(
            opbridge.rotary_embedding(xr, cr, sr), (xr, cr, sr), grad_y[row : row + 1]
        )
        torch.testing.assert_close(got[0][row : row + 1], want[0])
        torch.testing.assert_close(got[1][row], want[1])
        torch.testing.assert_close(got[2][row], want[2])


def test_batch_of_one_tables_broadcast_like_2d_tables():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 5, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    angles = torch.rand(5, 4, generator=g, dtype=torch.float64)
    c2, s2 = (t.clone().requires_grad_() for t in (angles.cos(), angles.sin()))
    c3, s3 = (t[None].clone().requires_grad_() for t in (angles.cos(), angles.sin()))
    y2, y3 = opbridge.rotary_embedding(x, c2, s2), opbridge.rotary_embedding(x, c3, s3)
    torch.testing.assert_close(y3, y2, atol=0, rtol=0)
    g2 = torch.autograd.grad(y2.sum(), (c2, s2))
    g3 = torch.autograd.grad(y3.sum(), (c3, s3))
    assert g3[0].shape == (1, 5, 4)
    torch.testing.assert_close(g3[0][0], g2[0], atol=0, rtol=0)
    torch.testing.assert_close(g3[1][0], g2[1], atol=0, rtol=0)


class _Rope(torch.nn.Module):
    def __init__(self, interleaved: bool):
        super().__init__()
        self.interleaved = interleaved

    def forward(self, x, cos, sin):
        return opbridge.rotary_embedding(x, cos, sin, self.interleaved)


# The legacy exporter goes up to opset 20.
CONFIGS = [("dynamo", 18), ("dynamo", 23), ("legacy", 18), ("legacy", 20)]


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize(("exporter", "opset"), CONFIGS, ids=[f"{e}-opset{o}" for e, o in CONFIGS])
def test_per_batch_tables_export(interleaved, route, exporter, opset):
    """3-D cos/sin with a dynamic batch and sequence, by both routes and both
    exporters, run in ONNX Runtime on other batch sizes and positions."""
    half = 3 if interleaved else 4  # partial rotary when interleaved
    x = torch.randn(2, 5, 3, 8)
    cos, sin = card_module.left_padded_tables((0, 2), 5, half)
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=64)
    proto = opbridge.export.export(
        _Rope(interleaved).eval(),
        (x, cos, sin),
        route=route,
        opset=opset,
        dynamo=exporter == "dynamo",
        dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq}),
    )
    onnx.checker.check_model(proto, full_check=True)
    custom = [n for n in proto.graph.node if n.domain == "opbridge"]
    assert [n.op_type for n in custom] == (["RotaryEmbedding"] if route == "custom" else [])
    for pads, seq_len in (((0, 2), 5), ((0, 1, 3, 6), 7), ((4,), 9)):
        xb = torch.randn(len(pads), seq_len, 3, 8)
        cb, sb = card_module.left_padded_tables(pads, seq_len, half)
        expected = REFERENCE(xb, cb, sb, interleaved).numpy()
        for level in LEVELS:
            (got,) = run(proto, [xb.numpy(), cb.numpy(), sb.numpy()], level)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(pads))


@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_batch_of_one_tables_export(route, exporter):
    """A [1, seq, half] table broadcasts over x's batch on both routes."""
    x = torch.randn(3, 5, 2, 8)
    cos, sin = card_module.left_padded_tables((1,), 5, 4)
    proto = opbridge.export.export(
        _Rope(False).eval(), (x, cos, sin), route=route, opset=18, dynamo=exporter == "dynamo"
    )
    (got,) = run(proto, [x.numpy(), cos.numpy(), sin.numpy()])
    np.testing.assert_allclose(got, REFERENCE(x, cos, sin).numpy(), rtol=1e-5, atol=1e-5)
