"""The spec as the Python side reads it (shape rule with attributes)."""

from __future__ import annotations

import pytest

from opbridge._library import _C, specs


def test_infer_with_and_without_attributes():
    image = [(True, "uint8", [2, 8, 6, 3])]
    # Without attributes the layout is unknown: only dtype and batch.
    assert _C.infer("normalize_image", image) == [("float32", [2, -1, -1, -1])]
    attrs = [[0.5, 0.5, 0.5], [0.25, 0.25, 0.25], 1]
    assert _C.infer("normalize_image", image, attrs) == [("float32", [2, 3, 8, 6])]
    nchw = [(True, "float64", [2, 3, 8, 6])]
    assert _C.infer("normalize_image", nchw, [*attrs[:2], 0]) == [("float64", [2, 3, 8, 6])]
    with pytest.raises(ValueError, match="argument 'std' must be finite and non-zero"):
        _C.infer("normalize_image", image, [attrs[0], [0.5, 0.0, 0.5], 1])
    with pytest.raises(ValueError, match="argument 'approximate'"):
        _C.infer("bias_gelu", [(True, "float32", [2, 4]), (True, "float32", [4])], ["erf"])
    # Ops without an attribute-aware rule ignore the attributes.
    assert _C.infer(
        "rms_norm", [(True, "float32", [2, 4]), (True, "float32", [4]), (False, "", [])], [1e-6]
    ) == [("float32", [2, 4])]


def test_schemas_of_the_newer_operators():
    schemas = {name: spec["torch_schema"] for name, spec in specs().items()}
    assert schemas["add_rms_norm"] == (
        "add_rms_norm(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, "
        "float eps=1e-06) -> (Tensor, Tensor)"
    )
    assert (
        schemas["bias_gelu"] == "bias_gelu(Tensor x, Tensor bias, str approximate='none') -> Tensor"
    )
    assert schemas["rotary_embedding"] == (
        "rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor"
    )
    assert schemas["normalize_image"] == (
        "normalize_image(Tensor image, float[] mean, float[] std, "
        "bool channels_last_in=True) -> Tensor"
    )
    assert specs()["add_rms_norm"]["outputs"] == ["out", "residual_out"]
