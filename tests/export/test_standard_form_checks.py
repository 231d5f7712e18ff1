"""The standard form checked against the spec at export
(:mod:`opbridge.export.form_checks`): outputs' count, dtypes and shapes
against the shape rule, attribute values through the spec's checks."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import opbridge
from opbridge.export import ExportError, form_checks
from opbridge.export.builder import ProtoBuilder, ProtoValue
from opbridge.export.decompositions import standard_form as _decomposition
from opbridge.export.nodes import bind
from opbridge.ops import _card, card, register_card

EXPORTERS = [pytest.param(True, id="dynamo"), pytest.param(False, id="legacy")]


class Norm(torch.nn.Module):
    def forward(self, x, weight):
        return torch.ops.opbridge.rms_norm(x, weight, None, 1e-6)


@pytest.fixture
def rms_norm_form(monkeypatch):
    """Registers a standard form for opbridge::rms_norm (its card with that
    form) for the test."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))

    def register(form):
        register_card(dataclasses.replace(card("rms_norm"), standard=form))

    return register


def _rms(b, x, weight, eps, axis=-1):
    mean = b.op("ReduceMean", b.op("Mul", x, x), b.ints([axis]), keepdims=0)
    # Meant to restore the reduced last axis.
    mean = b.op("Unsqueeze", mean, b.ints([-1]))
    return b.op("Sqrt", b.op("Add", mean, b.constant(eps, like=weight)))


def wrong_axis(b, x, weight, bias=None, *, eps):
    """rms_norm reduced over axis 0 instead of -1."""
    return b.op("Mul", b.op("Div", x, _rms(b, x, weight, eps, axis=0)), weight)


def right_axis(b, x, weight, bias=None, *, eps):
    return b.op("Mul", b.op("Div", x, _rms(b, x, weight, eps)), weight)


def _export(x, dynamo, route="standard", **kwargs):
    return opbridge.export.export(
        Norm(), (x, torch.ones(x.shape[-1])), route=route, dynamo=dynamo, **kwargs
    )


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_a_form_over_the_wrong_axis_is_refused_on_a_non_square_input(rms_norm_form, dynamo):
    rms_norm_form(wrong_axis)
    with pytest.raises(ExportError) as refused:
        _export(torch.randn(3, 4), dynamo)
    message = str(refused.value)
    assert (
        "opbridge::rms_norm: its standard form, for x float32 [3, 4], weight float32 [4]" in message
    )
    assert "ONNX shape inference refuses it: (op_type:Div" in message
    assert "Incompatible dimensions" in message


@pytest.mark.parametrize("route", ["standard", "function"])
@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_a_form_over_the_wrong_axis_is_refused_on_a_square_input(rms_norm_form, dynamo, route):
    """On [4, 4] the wrong axis has the right shapes (and wrong numbers):
    the check builds the form again at distinct sizes the shape rule accepts."""
    rms_norm_form(wrong_axis)
    with pytest.raises(ExportError) as refused:
        _export(torch.randn(4, 4), dynamo, route=route)
    message = str(refused.value)
    assert "opbridge::rms_norm: its standard form" in message
    assert "at distinct sizes (x float32 [5, 4], weight float32 [4]" in message
    assert "in place of the export's (x float32 [4, 4], weight float32 [4]" in message
    assert "Incompatible dimensions" in message
    if route == "function":
        assert "standard form as a function body" in message


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_a_form_over_the_wrong_axis_is_refused_with_a_dynamic_dimension(rms_norm_form, dynamo):
    rms_norm_form(wrong_axis)
    x = torch.randn(4, 4)
    if dynamo:
        shapes = {"dynamic_shapes": ({0: torch.export.Dim("batch")}, None)}
    else:
        shapes = {"input_names": ["x", "weight"], "dynamic_axes": {"x": {0: "batch"}}}
    with pytest.raises(ExportError, match=r"at distinct sizes \(x float32 \[5, 4\]"):
        _export(x, dynamo, **shapes)


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_the_right_axis_exports_square_or_not(rms_norm_form, dynamo):
    rms_norm_form(right_axis)
    for shape in ((3, 4), (4, 4)):
        proto = _export(torch.randn(*shape), dynamo)
        assert {n.domain for n in proto.graph.node} == {""}


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_an_output_of_the_wrong_shape_names_the_output_and_both_shapes(rms_norm_form, dynamo):
    def reduced(b, x, weight, bias=None, *, eps):
        return b.op("ReduceMean", x, b.ints([-1]), keepdims=0)

    rms_norm_form(reduced)
    with pytest.raises(ExportError) as refused:
        _export(torch.randn(3, 4), dynamo)
    assert (
        "opbridge::rms_norm: its standard form, for x float32 [3, 4], weight float32 [4], "
        "eps=1e-06: output 'y' has rank 1 ([3]), its spec's shape rule gives rank 2 ([3, 4])"
    ) in str(refused.value)


def test_an_output_of_the_wrong_size_names_the_dimension(rms_norm_form):
    def sliced(b, x, weight, bias=None, *, eps):
        return b.op(
            "Slice", right_axis(b, x, weight, eps=eps), b.ints([0]), b.ints([2]), b.ints([0])
        )

    rms_norm_form(sliced)
    with pytest.raises(ExportError) as refused:
        _export(torch.randn(3, 4), dynamo=True)
    assert (
        "output 'y' has shape [2, 4], its spec's shape rule gives [3, 4] (dimension 0: 2, not 3)"
    ) in str(refused.value)


@pytest.mark.parametrize("route", ["standard", "function"])
@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_the_wrong_number_of_outputs_is_refused(rms_norm_form, dynamo, route):
    def two(b, x, weight, bias=None, *, eps):
        y = right_axis(b, x, weight, eps=eps)
        return y, y

    rms_norm_form(two)
    with pytest.raises(ExportError, match=r"gives 2 outputs, (its|the) spec has 1"):
        _export(torch.randn(3, 4), dynamo, route=route)


@pytest.mark.parametrize("route", ["standard", "function"])
@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_an_output_of_the_wrong_dtype_is_refused(rms_norm_form, dynamo, route):
    def widened(b, x, weight, bias=None, *, eps):
        return b.op("Cast", right_axis(b, x, weight, eps=eps), to=11)  # DOUBLE

    rms_norm_form(widened)
    with pytest.raises(ExportError) as refused:
        _export(torch.randn(3, 4), dynamo, route=route)
    assert "output 'y' is float64, its spec's shape rule gives float32" in str(refused.value)


class Normalize(torch.nn.Module):
    def forward(self, image):
        return torch.ops.opbridge.normalize_image(image, [0.5, 0.4, 0.3], [0.0, 0.3, 0.4], True)


@pytest.fixture
def lenient_fake_kernel():
    """normalize_image's fake kernel without the spec's attribute checks (as
    a library whose checks run only in its kernel has it): the export then
    traces an attribute value the spec refuses."""

    def lenient(image, mean, std, channels_last_in=True):
        n, h, w, c = image.shape if channels_last_in else image.permute(0, 2, 3, 1).shape
        dtype = torch.float32 if image.dtype == torch.uint8 else image.dtype
        return image.new_empty((n, c, h, w), dtype=dtype)

    library = torch.library.Library("opbridge", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        library.impl("normalize_image", lenient, "Meta")
    yield
    library._destroy()


@pytest.mark.parametrize("route", ["standard", "function"])
def test_an_attribute_value_the_spec_refuses_is_refused(lenient_fake_kernel, route):
    image = torch.randint(0, 255, (1, 4, 5, 3), dtype=torch.uint8)
    with pytest.raises(ExportError) as refused:
        opbridge.export.export(Normalize().eval(), (image,), route=route)
    message = str(refused.value)
    assert message.startswith(
        "opbridge.export.export: opbridge::normalize_image: attribute 'std' = [0.0, 0.3"
    )
    assert "is a value its spec refuses" in message
    assert "argument 'std' must be finite and non-zero for every channel, got 0 for channel 0" in (
        message
    )


def test_an_attribute_the_spec_refuses_is_found_without_its_name_in_the_message():
    """A rule whose message does not name the argument: the attribute is the
    one whose default the rule accepts."""
    library, spec = opbridge._library.BUILTIN, opbridge.specs()["bias_gelu"]
    form = _decomposition(library, spec)
    seen = [form_checks.Seen("float32", (2, 3)), form_checks.Seen("float32", (3,))]
    check = form_checks._Check(library, spec, form, seen, {"approximate": "foo"}, 18, (), "form")
    with pytest.raises(ExportError, match="attribute 'approximate' = 'foo' is a value its spec"):
        check._refused([[2, 3], [3]], "refused")


DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.uint8: "uint8",
}


@pytest.mark.parametrize("name", list(opbridge.specs()))
def test_every_builtin_standard_form_agrees_with_its_spec(name):
    """Every sample of every dtype, at the example's sizes and with a dynamic
    first dimension, at opsets 18 and 23 (the forms' two families)."""
    library, spec = opbridge._library.BUILTIN, opbridge.specs()[name]
    form = _decomposition(library, spec)
    formals = [p["name"] for p in spec["inputs"]]
    checked = 0
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for sample in card(name).samples(dtype, large=False):
            inputs, attrs = bind(spec, sample.args, sample.kwargs)
            for opset in (18, 23):
                for dynamic in (False, True):
                    seen = []
                    for value in inputs:
                        if value is None:
                            seen.append(None)
                            continue
                        shape = tuple(value.shape)
                        if dynamic and len(shape) >= 2:
                            shape = ("batch", *shape[1:])
                        seen.append(form_checks.Seen(DTYPES[value.dtype], shape))
                    values = [
                        None
                        if s is None
                        else ProtoValue(
                            f, s.dtype, [d if isinstance(d, int) else None for d in s.shape]
                        )
                        for f, s in zip(formals, seen, strict=True)
                    ]
                    try:
                        result = form(ProtoBuilder(opset), *values, **attrs)
                    except ValueError:
                        continue  # no exact form at this opset for this dtype
                    form_checks.check_form(library, spec, form, seen, attrs, result, opset=opset)
                    checked += 1
    assert checked > 0
