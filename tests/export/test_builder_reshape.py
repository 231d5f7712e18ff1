"""A standard form that reshapes with a 0 (keep that dimension) and no -1,
as ``Reshape(x, [0, n])``: the TorchScript exporter's shape inference fails
an internal assert on it ("minus_one_pos != -1"), so the legacy builder
reads each kept dimension from the input's Shape for a constant shape,
and refuses a shape computed from constants with an error that names the
op and says what to write instead."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

import opbridge
from opbridge.export import ExportError
from opbridge.ops import Card, _card, register_card

NAMESPACE = "opbridge_reshape_test"
EXPORTERS = [pytest.param(True, id="dynamo"), pytest.param(False, id="legacy")]


@torch.library.custom_op(f"{NAMESPACE}::merge_last", mutates_args=())
def merge_last(x: torch.Tensor) -> torch.Tensor:
    """[b, m, n, k] -> [b, m, n * k]."""
    return x.flatten(2).clone()


@merge_last.register_fake
def _(x):
    return x.new_empty(x.shape[0], x.shape[1], x.shape[2] * x.shape[3])


def keep_the_first(b, x):
    _, m, n, k = b.shape(x)
    return b.op("Reshape", x, b.ints([0, m, n * k]))


def keep_the_first_two(b, x):
    _, _, n, k = b.shape(x)
    return b.op("Reshape", x, b.ints([0, 0, n * k]))


def keep_around_a_size(b, x):
    """A first Reshape keeps dimensions 0, 2 and 3 around dimension 1's size."""
    _, m, n, k = b.shape(x)
    same = b.op("Reshape", x, b.ints([0, m, 0, 0]))
    return b.op("Reshape", same, b.ints([0, 0, n * k]))


def keep_the_first_and_infer_one(b, x):
    _, m, _, _ = b.shape(x)
    return b.op("Reshape", x, b.ints([0, m, -1]))


def computed_shape(b, x):
    _, m, n, k = b.shape(x)
    return b.op("Reshape", x, b.op("Concat", b.ints([0]), b.ints([m, n * k]), axis=0))


@pytest.fixture
def merge_last_form(monkeypatch):
    """Registers the op's card with a given standard form, for the test."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))

    def register(form):
        register_card(
            Card(
                name="merge_last",
                namespace=NAMESPACE,
                call=merge_last,
                standard=form,
                reference=lambda x: x.flatten(2),
            )
        )

    return register


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.opbridge_reshape_test.merge_last(x) * 2.0


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-batch"])
@pytest.mark.parametrize("dynamo", EXPORTERS)
@pytest.mark.parametrize(
    "form", [keep_the_first, keep_the_first_two, keep_around_a_size, keep_the_first_and_infer_one]
)
def test_a_reshape_that_keeps_a_dimension_exports_and_runs(merge_last_form, form, dynamo, dynamic):
    merge_last_form(form)
    model, x = Model().eval(), torch.randn(2, 3, 4, 5)
    proto = opbridge.export.export(
        model, (x,), route="standard", dynamo=dynamo, dynamic_batch=dynamic
    )
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
    (output,) = proto.graph.output
    assert _dims(output) == ["batch" if dynamic else 2, 3, 20]
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    name = session.get_inputs()[0].name
    for batch in (2, 7) if dynamic else (2,):
        x = torch.randn(batch, 3, 4, 5)
        (got,) = session.run(None, {name: x.numpy()})
        np.testing.assert_array_equal(got, model(x).numpy())


def test_a_computed_shape_that_keeps_a_dimension_is_refused_naming_the_form(merge_last_form):
    merge_last_form(computed_shape)
    with pytest.raises(ExportError) as refused:
        opbridge.export.export(
            Model().eval(), (torch.randn(2, 3, 4, 5),), route="standard", dynamo=False
        )
    message = str(refused.value)
    assert message.startswith(f"{NAMESPACE}::merge_last: its standard form: Reshape"), message
    assert "write the shape as one constant, b.ints([...])" in message
    assert "INTERNAL ASSERT" not in message
    # The dynamo exporter takes the same form.
    proto = opbridge.export.export(Model().eval(), (torch.randn(2, 3, 4, 5),), route="standard")
    assert "Reshape" in {n.op_type for n in proto.graph.node}
