"""A call's arguments in schema order (opbridge._schema), as the stable-ABI
library's fake kernels and opbridge.compile's decompositions take them."""

import pytest
import torch

from opbridge import _stable, compiling
from opbridge._schema import schema_order
from opbridge.ops import cards

RMS_NORM = torch.ops.opbridge.rms_norm.default  # (x, weight, bias=None, eps=1e-6)
SCALED_CLAMP = torch.ops.opbridge.scaled_clamp.default  # (x, scale, min_val=0., max_val=6.)


def _refuse(name):
    return LookupError(f"no {name}")


def test_keywords_and_defaults_fill_the_arguments_after_the_positional_ones():
    arguments = SCALED_CLAMP._schema.arguments
    assert schema_order(arguments, ("x", 2.0), {}, _refuse) == ["x", 2.0, 0.0, 6.0]
    assert schema_order(arguments, ("x",), {"scale": 3.0, "max_val": 1.0}, _refuse) == [
        "x",
        3.0,
        0.0,
        1.0,
    ]
    # A positional argument wins over a keyword of the same name.
    assert schema_order(arguments, ("x", 2.0, -1.0), {"min_val": 5.0}, _refuse) == [
        "x",
        2.0,
        -1.0,
        6.0,
    ]


def test_an_argument_neither_given_nor_defaulted_raises_the_callers_error():
    with pytest.raises(LookupError, match="no scale"):
        schema_order(SCALED_CLAMP._schema.arguments, ("x",), {"max_val": 1.0}, _refuse)


def test_the_stable_abi_binder_fills_defaults_and_raises_runtime_error():
    bind = _stable._binder(RMS_NORM)
    assert bind(("x", "w"), {}) == ["x", "w", None, pytest.approx(1e-6)]
    assert bind(("x",), {"weight": "w", "eps": 0.5}) == ["x", "w", None, 0.5]
    with pytest.raises(RuntimeError, match=r"rms_norm.*argument 'weight' is missing"):
        bind(("x",), {})


def test_a_decomposition_takes_keywords_in_schema_order_and_raises_type_error():
    found = cards()["opbridge::scaled_clamp"]
    decompose = compiling.decomposition(found)
    x = torch.linspace(-4, 4, 9)
    got = decompose(x, max_val=3.0, min_val=-1.0, scale=2.0)
    torch.testing.assert_close(got, torch.clamp(x * 2.0, -1.0, 3.0))
    torch.testing.assert_close(got, SCALED_CLAMP(x, 2.0, -1.0, 3.0))
    with pytest.raises(
        TypeError, match=r"opbridge.compile: .*scaled_clamp.* without argument 'scale'"
    ):
        decompose(x, max_val=3.0)
