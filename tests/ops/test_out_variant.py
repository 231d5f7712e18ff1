"""The out= form every operator gets from its spec:
``torch.ops.<ns>.<op>.out(..., out=...)`` writes into given tensors."""

from __future__ import annotations

import pytest
import torch

import opbridge

from op_cases import OPS, as_tuple


def _outs_like(result):
    return [torch.empty(0, dtype=r.dtype) for r in as_tuple(result)]


def _call_out(name, sample, outs):
    spec = opbridge.specs()[name]
    names = ["out"] if len(spec["outputs"]) == 1 else spec["outputs"]
    op = getattr(torch.ops.opbridge, name).out
    return op(*sample.args, **sample.kwargs, **dict(zip(names, outs, strict=True)))


@pytest.mark.parametrize("name", sorted(OPS))
def test_out_form_equals_the_op_and_returns_the_given_tensors(name):
    for sample in OPS[name].samples(torch.float32, large=False):
        expected = OPS[name].call(*sample.args, **sample.kwargs)
        outs = _outs_like(expected)
        result = as_tuple(_call_out(name, sample, outs))
        for got, given, want in zip(result, outs, as_tuple(expected), strict=True):
            assert got is given or got.data_ptr() == given.data_ptr()
            torch.testing.assert_close(given, want, atol=0, rtol=0, msg=f"{name} [{sample!r}]")


def test_out_of_another_shape_is_resized_and_a_strided_one_is_filled():
    x = torch.randn(6, 10)
    expected = opbridge.scaled_clamp(x, 0.5)
    out = torch.full((3,), 7.0)
    torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=out)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    strided = torch.empty(10, 6).t()
    torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=strided)
    assert not strided.is_contiguous()
    torch.testing.assert_close(strided, expected, atol=0, rtol=0)


def test_out_may_be_the_input():
    x = torch.randn(64, 32)
    w = torch.randn(32)
    expected = opbridge.rms_norm(x, w)
    torch.ops.opbridge.rms_norm.out(x, w, out=x)
    torch.testing.assert_close(x, expected, atol=0, rtol=0)


def test_out_of_the_wrong_dtype_names_the_op_and_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match=r"scaled_clamp\.out: argument 'out' must be float32"):
        torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=torch.empty(4, 8, dtype=torch.float64))
    outs = {"out": torch.empty(0), "residual_out": torch.empty(0, dtype=torch.float16)}
    with pytest.raises(RuntimeError, match=r"add_rms_norm\.out: argument 'residual_out' must be"):
        torch.ops.opbridge.add_rms_norm.out(x, x, torch.ones(8), **outs)


def test_out_form_refuses_autograd_and_moves_the_version_counter():
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"scaled_clamp\.out: the out= form does not support"):
        torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=torch.empty(4, 8))
    out = torch.empty(4, 8)
    before = out._version
    with torch.no_grad():
        torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=out)
    assert out._version > before


def test_out_form_on_meta_tensors_resizes():
    x = torch.empty(5, 7, device="meta")
    out = torch.empty(0, device="meta")
    result = torch.ops.opbridge.scaled_clamp.out(x, 0.5, out=out)
    assert result.shape == (5, 7) and out.shape == (5, 7)
