"""opbridge.sdk.testing's checks (what a user's operator is tested with) hold for
the built-in operators, and fail where they should."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import opbridge.sdk.testing as checks
from opbridge.ops import card, cards

BUILTIN = [q for q in cards() if q.startswith("opbridge::")]
# Attribute values the built-in kernels refuse (their shape rules' checks).
INVALID_ATTRS = {
    "opbridge::bias_gelu": {"approximate": ["sigmoid"]},
    "opbridge::normalize_image": {"std": [[0.0], [float("nan")]]},
}


@pytest.mark.parametrize("qualified", BUILTIN)
def test_bad_input_check_passes_for_builtin_ops(qualified):
    checks.check_bad_input(card(qualified), INVALID_ATTRS.get(qualified))


@pytest.mark.parametrize("qualified", BUILTIN)
def test_builtin_ops_take_every_floating_dtype_and_match_their_reference_in_16_bits(qualified):
    assert checks.supported_dtypes(card(qualified)) == checks.FLOATING_DTYPES
    checks.check_reference(card(qualified), dtypes=checks.HALF_DTYPES)


def test_bad_inputs_cover_each_kind_the_op_has():
    whats = [bad.what for bad in checks.bad_inputs(card("rms_norm"))]
    assert whats == ["int32 x", "float64 weight with a float32 x"]
    # One tensor input: no mixed dtypes; the invalid values asked for.
    whats = [bad.what for bad in checks.bad_inputs(card("normalize_image"), {"std": [[0.0]]})]
    assert whats == ["int32 image", "std=[0.0]"]
    with pytest.raises(AssertionError, match=r"invalid_attrs names 'eps', not one of"):
        checks.bad_inputs(card("scaled_clamp"), {"eps": [0.0]})


def _refusing(base, dtype, message):
    """``base`` with a call that raises ``message`` for an input of ``dtype``."""

    def call(x, *args, **kwargs):
        if x.dtype == dtype:
            raise RuntimeError(message)
        return base.call(x, *args, **kwargs)

    return dataclasses.replace(base, call=call)


def test_a_dtype_refused_naming_the_first_input_is_unsupported_and_checked_in_both_runtimes():
    base = card("scaled_clamp")
    refusing = _refusing(
        base,
        torch.float16,
        "opbridge::scaled_clamp (ONNX opbridge::ScaledClamp): argument 'x' must be float32, "
        "float64 or bfloat16, got float16",
    )
    assert checks.supported_dtypes(refusing) == (torch.float32, torch.float64, torch.bfloat16)
    bad = [b for b in checks.bad_inputs(refusing) if b.what == "float16 x"]
    assert len(bad) == 1 and bad[0].sample.args[0].dtype == torch.float16
    # PyTorch refuses it; the ONNX Runtime kernel (the real one) takes it.
    with pytest.raises(AssertionError, match="float16 x was accepted in ONNX Runtime"):
        checks.check_refused(refusing, bad[0])


def test_any_other_error_at_a_dtype_surfaces():
    broken = _refusing(card("scaled_clamp"), torch.bfloat16, "the kernel crashed")
    with pytest.raises(RuntimeError, match="the kernel crashed"):
        checks.supported_dtypes(broken)


def test_bad_input_check_fails_when_the_op_takes_it():
    base = card("scaled_clamp")
    # The reference takes an int32 x.
    with pytest.raises(AssertionError, match="int32 x was accepted in PyTorch"):
        checks.check_bad_input(dataclasses.replace(base, call=base.reference))
    # A valid value named as invalid.
    with pytest.raises(AssertionError, match=r"scale=2\.0 was accepted in PyTorch"):
        checks.check_bad_input(base, {"scale": [2.0]})


def test_export_cases_are_every_route_both_exporters_and_opsets_18_and_23():
    from opbridge.export.routes import routes

    cases = checks.export_cases()
    assert {route for route, _, _ in cases} == set(routes()) >= {"ort", "function"}
    for route in routes():
        assert [(d, o) for r, d, o in cases if r == route] == [(True, 18), (True, 23), (False, 18)]
    assert checks.export_case_id(("ort", False, 18)) == "ort-legacy-opset18"


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("route", ["custom", "standard", "ort", "function"])
def test_export_check_passes_for_a_builtin_op(route, opset):
    checks.check_export(card("rms_norm"), route=route, dynamo=True, opset=opset)


@pytest.mark.parametrize("route", ["custom", "standard", "ort", "function"])
@pytest.mark.parametrize("runtime", ["openvino"])
def test_export_check_runs_in_another_runtime(route, runtime):
    checks.check_export(card("rms_norm"), route=route, dynamo=True, runtime=runtime)


def test_export_check_runs_a_library_free_route_without_the_library(monkeypatch):
    from opbridge import runtimes

    ort = runtimes.get("onnxruntime")
    plain = []

    def plain_session(model, level=None):
        plain.append(level)
        return ort.plain_session(model, level=level)

    def session(model, level=None, threads=None):
        raise AssertionError("the standard route's model ran with the library")

    monkeypatch.setattr(runtimes, "_REGISTERED", dict(runtimes._REGISTERED))
    runtimes.register_runtime(
        dataclasses.replace(ort, name="plain", session=session, plain_session=plain_session)
    )
    checks.check_export(card("rms_norm"), route="standard", runtime="plain")
    assert plain == [ort.base_level, ort.default_level]
    without = dataclasses.replace(ort, name="without", plain_session=None)
    runtimes.register_runtime(without)
    with pytest.raises(ValueError, match="no plain_session"):
        checks.check_export(card("rms_norm"), route="standard", runtime="without")


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_reference_check_fails_on_a_wrong_reference(dtype):
    wrong = dataclasses.replace(card("scaled_clamp"), reference=lambda x, *a, **k: x)
    with pytest.raises(AssertionError):
        checks.check_reference(wrong, dtypes=(dtype,))


def test_export_check_fails_on_a_wrong_decomposition():
    def wrong(b, x, weight, bias=None, *, eps):
        return b.op("Mul", x, weight)

    broken = dataclasses.replace(card("rms_norm"), standard=wrong)
    # The export takes the registered card's decomposition.
    from opbridge.ops import register_card

    register_card(broken)
    try:
        with pytest.raises(AssertionError):
            checks.check_export(broken, route="standard", dynamo=True)
    finally:
        from opbridge.ops import _card

        _card._REGISTERED.pop(broken.qualified_name, None)


def test_value_domains_under_opbridge_check_refuses_a_value_the_spec_does_not_declare():
    rms_norm = card("rms_norm")
    # Without the scan, -inf in x gives NaN in both the op and its reference.
    checks.check_value_domains(rms_norm, {"x": ["-inf"]})
    # Under OPBRIDGE_CHECK=1 the scan refuses it: rms_norm declares no value.
    refused = r"rms_norm: value domains under OPBRIDGE_CHECK=1: .*argument 'x' contains -Inf"
    with pytest.raises(AssertionError, match=refused):
        checks.check_value_domains_under_check(rms_norm, {"x": ["-inf"]})
    checks.check_value_domains_under_check(rms_norm)
