"""opbridge.compile: each operator a kernel or decomposed for inductor, only
inside the compilation; the benchmark's opbridge_compile rows. Tiny models:
what is checked is which code inductor is given and the numbers, not speed
(the timer is replaced where a choice is made)."""

from __future__ import annotations

import contextlib
import importlib
import json
from unittest import mock

import pytest
import torch
from torch import nn

import opbridge
from opbridge import compiling
from opbridge import nn as obnn
from opbridge.__main__ import main
from opbridge.ops import _card, register_card
from opbridge.ops.calls import CallRecorder

RMS_NORM = "opbridge::rms_norm"
SHIFTED_RELU = "myops::shifted_relu"


@pytest.fixture
def registry(monkeypatch):
    """Cards registered during a test are gone after it."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))


@pytest.fixture
def user_card(registry):
    """The card of an operator of another library (tests/user_op_card.py)."""
    return register_card(importlib.import_module("user_op_card").CARD)


class Tiny(nn.Module):
    """Linear -> RMSNorm -> the user's shifted_relu -> Linear: a built-in
    operator and one of another library, each next to a matrix product."""

    def __init__(self, card, dim: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.card = card
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.norm = obnn.RMSNorm(2 * dim)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.down(self.card.call(self.norm(self.up(x)), 0.25))


@contextlib.contextmanager
def generated_code():
    """The code inductor generates meanwhile, one string per compilation."""
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes


def _calls_in(code: str, op: str) -> int:
    namespace, name = op.split("::")
    return code.count(f"torch.ops.{namespace}.{name}.default(")


def _profiled_ops(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.events()}


def _fake_timer(faster: set[str], seen: list):
    """Calls each candidate once and says it is faster by 10% for each
    operator of ``faster`` it decomposes."""

    def timer(fns):
        seen.append(list(fns))
        times = {}
        for decomposed, fn in fns.items():
            fn()
            times[decomposed] = 1.0 - 0.1 * len(faster & set(decomposed))
        return times

    return timer


def test_auto_decomposes_where_faster_in_the_compilation_only(user_card):
    model, x = Tiny(user_card).eval(), torch.randn(2, 3, 16)
    with torch.no_grad():
        expected = model(x)
    seen = []
    with generated_code() as codes:
        compiled = opbridge.compile(model, (x,), ops="auto", timer=_fake_timer({RMS_NORM}, seen))
    choice = compiled.opbridge_compile_choice
    assert choice.plan == {RMS_NORM: "decompose", SHIFTED_RELU: "kernel"}
    # Kernels only against rms_norm decomposed, then that against both decomposed.
    assert seen == [[(), (RMS_NORM,)], [(RMS_NORM,), (RMS_NORM, SHIFTED_RELU)]]
    assert [c.kept for c in choice.candidates] == [False, True, False]
    assert choice.checks == dict.fromkeys((RMS_NORM, SHIFTED_RELU), "composite matches the kernel")
    assert "<== kept" in choice.table()
    # Inductor was given each candidate's kernels and composites (the user's
    # card's too).
    assert [(_calls_in(c, RMS_NORM), _calls_in(c, SHIFTED_RELU)) for c in codes] == [
        (1, 1),
        (0, 1),
        (0, 0),
    ]
    tol = compiling.tolerance(torch.float32)
    with torch.no_grad(), generated_code() as again:
        got = compiled(x)
        ran = _profiled_ops(lambda: compiled(x))
    # The chosen compilation runs, not recompiled: rms_norm's composite, the
    # user's kernel; its numbers are eager's within the tolerance.
    assert again == []
    assert "opbridge::rms_norm" not in ran and SHIFTED_RELU in ran
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)
    assert choice.max_abs_diff is not None and choice.max_abs_diff <= tol
    # Eager calls still call the kernels.
    seen_eager = []
    with torch.no_grad(), CallRecorder(lambda op, *_: seen_eager.append(op), ["opbridge", "myops"]):
        torch.testing.assert_close(model(x), expected, atol=0, rtol=0)
    assert seen_eager == [RMS_NORM, SHIFTED_RELU]


def test_gradients_flow_through_a_decomposed_operator(user_card):
    def fn(x):
        return user_card.call(x * 2, 0.25)

    compiled = opbridge.compile(fn, ops=[SHIFTED_RELU])
    x = torch.randn(4, 8, requires_grad=True)
    with generated_code() as codes:
        compiled(x).sum().backward()
    assert codes and all(_calls_in(c, SHIFTED_RELU) == 0 for c in codes)
    expected = torch.autograd.grad(fn(x).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)


def test_a_composite_that_differs_from_its_kernel_is_never_decomposed(user_card):
    card = user_card
    wrong = register_card(_card.Card(**{**vars(card), "composite": lambda x, shift: x + shift}))
    calls = compiling.carded_calls(lambda x: wrong.call(x, 0.5), (torch.randn(8),))
    why = compiling.check_composite(wrong, calls[SHIFTED_RELU])
    assert why and "differs from the kernel" in why and "float32[8]" in why


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="opbridge::rms_norm: expected one of"):
        opbridge.compile(nn.Identity(), ops={"rms_norm": "fast"})
    with pytest.raises(ValueError, match="no card for operator 'nope'"):
        opbridge.compile(nn.Identity(), ops=["nope"])
    with pytest.raises(ValueError, match='ops="auto" needs example_inputs'):
        opbridge.compile(nn.Identity())


def test_quick_models_have_the_opbridge_compile_row(tmp_path, capsys):
    out, md = tmp_path / "models.json", tmp_path / "models.md"
    argv = ["bench", "--quick", "--models", "llama_decode", "--threads", "1"]
    argv += ["--impls", "opbridge_torch", "opbridge_compile", "opbridge_compile_auto"]
    assert main([*argv, "--json", str(out), "--markdown", str(md)]) == 0
    rows = {r["impl"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {"opbridge_torch", "opbridge_compile"}
    assert rows["opbridge_compile"]["max_abs_diff"] < 1e-4
    assert "| llama_decode | 2x4x64 float32 | 1 | opbridge_compile |" in md.read_text()
    assert "opbridge_compile_auto: left out at --quick sizes" in capsys.readouterr().out
