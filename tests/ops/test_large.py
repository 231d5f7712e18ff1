"""Index safety past 2**31 elements: opt-in (needs about 18 GiB of memory).

Run with ``./dev test -m large tests/ops/test_large.py``; the default run
deselects these tests."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge

from op_cases import OPS
from ort_helpers import run, single_node_model

pytestmark = pytest.mark.large
COLS = 1 << 16
ROWS = (1 << 15) + 3  # rows * cols > 2**31
N = ROWS * COLS


def _input() -> torch.Tensor:
    x = torch.empty(ROWS, COLS)
    x.uniform_(-4.0, 4.0)
    return x


def _check_rows(got: torch.Tensor, x: torch.Tensor, fn) -> None:
    # The first rows, the rows around element 2**31 and the last rows.
    boundary = (1 << 31) // COLS
    for rows in (slice(0, 2), slice(boundary - 1, boundary + 2), slice(ROWS - 2, ROWS)):
        torch.testing.assert_close(got[rows], fn(x[rows]), atol=1e-5, rtol=1e-5)


def test_scaled_clamp_past_2_31_elements_in_torch():
    assert N > 2**31
    x = _input()
    y = opbridge.scaled_clamp(x, 1.5, -1.0, 2.0)
    _check_rows(y, x, lambda t: OPS["scaled_clamp"].reference(t, 1.5, -1.0, 2.0))
    del x, y
    gc.collect()


def test_rms_norm_past_2_31_elements_in_torch():
    x = _input()
    w = torch.rand(COLS) + 0.5
    y = opbridge.rms_norm(x, w)
    _check_rows(y, x, lambda t: OPS["rms_norm"].reference(t, w))
    del x, y
    gc.collect()


def test_rms_norm_past_2_31_elements_in_onnx_runtime():
    x = _input()
    w = torch.rand(COLS) + 0.5
    model = single_node_model(
        "RmsNorm",
        [("x", TensorProto.FLOAT, [ROWS, COLS]), ("w", TensorProto.FLOAT, [COLS])],
        {"eps": 1e-6},
    )
    (y,) = run(model, [x.numpy(), w.numpy()])
    _check_rows(torch.from_numpy(y), x, lambda t: OPS["rms_norm"].reference(t, w))
    assert np.isfinite(y[-1]).all()
