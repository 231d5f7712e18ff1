"""An operator's own error raised inside torch's dynamo exporter (its form's
refusal or failure, its checks under torch.export) comes out of
opbridge.export.export with its own message first, naming the operator,
and torch's advice (file an issue, submit a PR) after it."""

from __future__ import annotations

import pytest
import torch

import opbridge
from opbridge.export import ExportError
from opbridge.ops import Card, _card, register_card

NAMESPACE = "opbridge_errors_test"
QUALIFIED = f"{NAMESPACE}::shift"


@torch.library.custom_op(QUALIFIED, mutates_args=())
def shift(x: torch.Tensor, by: float) -> torch.Tensor:
    return x + by


@shift.register_fake
def _(x, by):
    return torch.empty_like(x)


def refusing(b, x, *, by):
    raise ValueError(f"{QUALIFIED}: by={by} has no standard form; export with route='custom'")


def failing(b, x, *, by):
    return b.op("Add", x, b.no_such_method(by))


@pytest.fixture
def shift_form(monkeypatch):
    """Registers the op's card with a given standard form, for the test."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))

    def register(form):
        register_card(
            Card(name="shift", namespace=NAMESPACE, call=shift, standard=form, reference=shift)
        )

    return register


class Shift(torch.nn.Module):
    def forward(self, x):
        return torch.ops.opbridge_errors_test.shift(x, 0.5) * 2.0


def _export(model, args, dynamo=True):
    return opbridge.export.export(model.eval(), args, route="standard", dynamo=dynamo)


def _first_then_advice(message: str, first: str, advice: str) -> None:
    assert message.startswith(first), message
    assert advice in message, message
    assert message.index(advice) > len(first), message


def test_a_forms_refusal_comes_first_and_torchs_advice_after(shift_form):
    shift_form(refusing)
    with pytest.raises(ExportError) as refused:
        _export(Shift(), (torch.randn(2, 3),))
    message = str(refused.value)
    _first_then_advice(
        message,
        f"{QUALIFIED}: by=0.5 has no standard form; export with route='custom' "
        "(export at opset 18)",
        "ConversionError from torch.onnx.export: Failed to convert the exported program",
    )
    assert "Create an issue in the PyTorch GitHub repository" in message
    # torch's colours and its summary of the chain (the message again) are left out.
    assert "\x1b[" not in message and "Exception summary" not in message
    assert message.count("has no standard form") == 1


def test_a_forms_failure_is_named_by_the_operator_with_its_traceback_below(shift_form):
    shift_form(failing)
    with pytest.raises(ExportError) as failed:
        _export(Shift(), (torch.randn(2, 3),))
    _first_then_advice(
        str(failed.value),
        f"{QUALIFIED}: its standard form failed: AttributeError: 'DynamoBuilder' object has no "
        "attribute 'no_such_method'",
        "ConversionError from torch.onnx.export:",
    )
    causes, error = [], failed.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, AttributeError) for e in causes)


def test_the_legacy_exporter_raises_the_forms_failure_named_the_same_way(shift_form):
    shift_form(failing)
    with pytest.raises(ExportError, match=rf"^{QUALIFIED}: its standard form failed: Attrib"):
        _export(Shift(), (torch.randn(2, 3),), dynamo=False)


class Norm(torch.nn.Module):
    def forward(self, x, weight):
        return opbridge.rms_norm(x, weight)


def test_an_operators_check_under_torch_export_comes_first_in_torchs_own_class():
    with pytest.raises(torch.onnx.OnnxExporterError) as refused:
        _export(Norm(), (torch.randn(2, 3), torch.randn(4)))
    _first_then_advice(
        str(refused.value),
        "opbridge::rms_norm (ONNX opbridge::RmsNorm): argument 'weight' must be 1-D with 3 "
        "elements (the last dimension of x), got shape [4]",
        "from torch.onnx.export: Failed to export the model with torch.export",
    )
