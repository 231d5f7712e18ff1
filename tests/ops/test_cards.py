"""Every operator's card: complete, found by name, and consistent (the
benchmark's alternatives compute what the call computes)."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types

import pytest
import torch

import opbridge
from opbridge.ops import _card, card, cards, check_card, decomposition, register_card

from op_cases import OPS, as_tuple, tolerances


@pytest.fixture
def user_card(monkeypatch):
    """The card of user_op_card's operator, registered for this test only."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))
    module = importlib.import_module("user_op_card")
    return register_card(module.CARD)


def test_every_operator_has_a_complete_card():
    found = cards()
    for name in opbridge.specs():
        entry = card(name)
        assert entry.name == name and entry.qualified_name == f"opbridge::{name}"
        assert found[entry.qualified_name] is entry
        assert entry.origin == f"python/opbridge/ops/{name}.py"
        assert check_card(entry) == [], name
    assert list(OPS) == list(opbridge.specs())


INCOMPLETE = {
    "no standard": ({"standard": None}, "has no standard"),
    "no samples": ({"samples": None}, "has no samples"),
    "no reference": ({"reference": None}, "has no reference"),
    "no bench_inputs": ({"bench_inputs": None}, "has no bench_inputs"),
    "no call": ({"call": None}, "has no call"),
    "samples signature": ({"samples": lambda dtype: iter(())}, "samples that do not take"),
    "bench_inputs signature": ({"bench_inputs": lambda: ()}, "bench_inputs that do not take"),
    "composite not callable": ({"composite": 3}, "composite that is not callable"),
    "no torch op": ({"name": "no_such_op"}, "torch.ops.opbridge.no_such_op, which is no operator"),
}


@pytest.mark.parametrize(("changes", "expected"), INCOMPLETE.values(), ids=list(INCOMPLETE))
def test_check_card_reports_what_is_missing(changes, expected):
    incomplete = dataclasses.replace(card("rms_norm"), **changes)
    problems = check_card(incomplete)
    assert len(problems) == 1, problems
    assert expected in problems[0]
    assert incomplete.qualified_name in problems[0]
    assert "python/opbridge/ops/rms_norm.py" in problems[0]


def test_a_module_without_card_is_named(monkeypatch):
    names = [*opbridge.specs(), "cardless_op", "moduleless_op"]
    monkeypatch.setattr(_card, "_builtin_names", lambda: names)
    monkeypatch.setitem(sys.modules, "opbridge.ops.cardless_op", types.ModuleType("cardless_op"))
    with pytest.raises(RuntimeError, match=r"'cardless_op'.*ops/cardless_op\.py has no .*CARD"):
        card("cardless_op")
    with pytest.raises(
        RuntimeError, match=r"'moduleless_op'.*no Python module .*moduleless_op\.py"
    ):
        card("moduleless_op")
    with pytest.raises(RuntimeError, match="cardless_op"):
        cards()


def test_lookup_by_bare_or_qualified_name():
    assert card("rms_norm") is card("opbridge::rms_norm")
    assert decomposition("rms_norm") is card("rms_norm").standard
    assert decomposition("opbridge::bias_gelu") is card("bias_gelu").standard
    with pytest.raises(KeyError, match=r"no card for operator 'no_such_op'; known: .*rms_norm"):
        card("no_such_op")
    with pytest.raises(KeyError, match="'myops::nothing'"):
        card("myops::nothing")


def test_registered_card(user_card):
    assert check_card(user_card) == []
    assert user_card.origin.endswith("tests/user_op_card.py")
    assert cards()["myops::shifted_relu"] is user_card
    assert card("myops::shifted_relu") is user_card
    assert user_card.display_name == "myops::shifted_relu"
    # A bare name means a built-in operator.
    with pytest.raises(KeyError, match="shifted_relu"):
        card("shifted_relu")
    replacement = register_card(dataclasses.replace(user_card, composite=None))
    assert card("myops::shifted_relu") is replacement
    assert list(cards()).count("myops::shifted_relu") == 1
    for sample in user_card.samples(large=False):
        torch.testing.assert_close(
            user_card.call(*sample.args), user_card.reference(*sample.args), msg=sample.label
        )
    with pytest.raises(TypeError, match="expected a Card"):
        register_card("myops::shifted_relu")


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_composite_and_builtin_compute_the_call(name, dtype):
    entry = OPS[name]
    impls = {k: getattr(entry, k) for k in ("composite", "builtin") if getattr(entry, k)}
    assert "composite" in impls
    tol = tolerances(dtype) if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    for sample in entry.samples(dtype, large=False):
        expected = as_tuple(entry.call(*sample.args, **sample.kwargs))
        for impl, fn in impls.items():
            got = as_tuple(fn(*sample.args, **sample.kwargs))
            assert len(got) == len(expected)
            for g, e in zip(got, expected, strict=True):
                torch.testing.assert_close(g, e, **tol, msg=f"{impl}: {sample.label}")


@pytest.mark.parametrize("name", list(OPS))
def test_bench_inputs_are_call_arguments(name):
    entry = OPS[name]
    args = entry.bench_inputs([8, 256], torch.float32)
    again = entry.bench_inputs([8, 256], torch.float32)
    for a, b in zip(args, again, strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    assert 8 * 256 / 2 <= tensors[0].numel() <= 2 * 8 * 256
    assert not any(t.requires_grad for t in tensors)
    expected = as_tuple(entry.reference(*args))
    for got, want in zip(as_tuple(entry.call(*args)), expected, strict=True):
        torch.testing.assert_close(got, want, **tolerances(torch.float32))
    grad_args = entry.bench_inputs([8, 256], torch.float32, requires_grad=True)
    floating = [a for a in grad_args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    assert all(t.requires_grad for t in floating)
    # Every output gets a gradient in the benchmark's fwd+bwd pass.
    assert entry.bench_backward == bool(floating)


def test_a_card_of_a_module_reads_its_math_and_takes_a_namespace():
    """Card.of_module: a user library's namespace by keyword (the scaffold's
    card), the module's functions as fields, its ort function as the ort
    route's form, and its reference as the composite where it has none."""
    from opbridge.ops import Card

    def reference(x):
        return x

    def ort(b, x):
        return x

    def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
        return iter(())

    module = {
        "reference": reference,
        "ort": ort,
        "standard": None,  # not a function: not read, given by keyword below
        "samples": samples,
        "bench_inputs": samples,
        "other": 3,
    }
    made = Card.of_module(module, name="shift", namespace="myops", call=reference, standard=ort)
    assert made.namespace == "myops" and made.qualified_name == "myops::shift"
    assert made.reference is reference and made.composite is reference
    assert made.form("ort") is ort and made.forms == {"ort": ort}
    assert made.form("standard") is ort and made.form("function") is None
    assert made.samples is samples and made.builtin is None
    given = Card.of_module(module, name="shift", call=reference, standard=ort, composite=abs)
    assert given.composite is abs
