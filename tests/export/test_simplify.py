"""Simplification of exported models (opbridge.export.simplify, export's
simplify=True and ``opbridge export --simplify``): library nodes kept as
exported by every route, the numbers PyTorch's, and a failing or
node-changing simplifier refused with the node named."""

from __future__ import annotations

import contextlib
import io
import warnings

import onnx
import onnxsim
import pytest
import torch

import opbridge
from opbridge.demo.models import build_llama_block
from opbridge.export.simplify import (
    METADATA_SIMPLIFIED_KEY,
    SimplifyError,
    SimplifyWarning,
    simplify,
)

ROUTES = ("standard", "ort", "custom")
STANDARD_DOMAINS = ("", "ai.onnx")


def _library_nodes(proto) -> list[tuple]:
    """Every node outside ai.onnx as what a model file stores of it."""
    return sorted(
        (
            node.domain,
            node.op_type,
            tuple(sorted(onnx.helper.get_attribute_value(a) for a in node.attribute)),
            len(node.input),
        )
        for node in proto.graph.node
        if node.domain not in STANDARD_DOMAINS
    )


def _metadata(proto) -> dict[str, str]:
    return {p.key: p.value for p in proto.metadata_props}


@pytest.fixture(scope="module")
def block():
    model, args = build_llama_block(batch=2, seq=8, dim=32)
    with torch.no_grad():
        expected = model(*args)
    return model, args, expected


def _export(model, args, route, **options):
    with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        return opbridge.export.export(model, args, route=route, **options)


def _run(proto, args):
    session = opbridge.runtimes.onnxruntime.InferenceSession(proto.SerializeToString())
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]


@pytest.fixture(scope="module", params=ROUTES)
def exported(request, block):
    # The legacy exporter leaves constants and shape arithmetic to fold, so
    # the simplifier has work to do on every route.
    model, args, _ = block
    return request.param, _export(model, args, request.param, dynamo=False)


def test_simplify_keeps_library_nodes_and_removes_others(exported):
    route, proto = exported
    with warnings.catch_warnings():
        warnings.simplefilter("error", SimplifyWarning)
        simplified, report = simplify(proto)
    assert report.simplified, report.reason
    assert report.nodes_before == len(proto.graph.node)
    assert report.nodes_after == len(simplified.graph.node) < len(proto.graph.node)
    assert _library_nodes(simplified) == _library_nodes(proto)
    assert report.library_nodes == len(_library_nodes(proto))
    if route == "custom":
        found = {n[1] for n in _library_nodes(simplified) if n[0] == opbridge.ONNX_DOMAIN}
        assert found == {"RmsNorm", "AddRmsNorm", "RotaryEmbedding", "BiasGelu"}
    if route == "ort":
        assert any(n[0] == "com.microsoft" for n in _library_nodes(simplified))
    metadata = _metadata(simplified)
    assert metadata[METADATA_SIMPLIFIED_KEY] == f"onnxsim {onnxsim.__version__.lstrip('v')}"
    assert metadata["opbridge.route"] == route
    assert METADATA_SIMPLIFIED_KEY not in _metadata(proto)  # the given model is not changed
    assert "simplified with onnxsim" in report.line()


def test_simplified_model_computes_pytorchs_numbers(exported, block):
    route, proto = exported
    model, args, expected = block
    simplified, _ = simplify(proto)
    torch.testing.assert_close(torch.from_numpy(_run(simplified, args)), expected)
    report = opbridge.verify(model, args, onnx_model=simplified, layers=False, draws=1)
    assert report.passed, report.failures()
    assert report.route == route


def test_export_simplify_option_and_keyword(block):
    model, args, expected = block
    plain = _export(model, args, "custom")
    by_keyword = _export(model, args, "custom", simplify=True, dynamic_batch=True)
    by_options = _export(
        model, args, "custom", options=opbridge.ExportOptions(simplify=True, dynamic_batch=True)
    )
    for proto in (by_keyword, by_options):
        assert METADATA_SIMPLIFIED_KEY in _metadata(proto)
        assert _library_nodes(proto) == _library_nodes(plain)
        assert len(proto.graph.node) <= len(plain.graph.node)
        torch.testing.assert_close(torch.from_numpy(_run(proto, args)), expected)
    assert METADATA_SIMPLIFIED_KEY not in _metadata(plain)


def _raising(*_args, **_kwargs):
    raise RuntimeError("shape inference crashed\nmore detail")


def test_a_failing_simplifier_keeps_the_model_with_a_warning(exported, monkeypatch):
    _, proto = exported
    monkeypatch.setattr(onnxsim, "simplify", _raising)
    with pytest.warns(
        SimplifyWarning, match="onnxsim failed: RuntimeError: shape inference crashed"
    ):
        kept, report = simplify(proto)
    assert kept is proto and not report.simplified
    assert report.nodes_after == report.nodes_before == len(proto.graph.node)
    assert "kept the model as exported" in report.line()
    with pytest.raises(SimplifyError, match="onnxsim failed"):
        simplify(proto, strict=True)


def test_a_failed_check_keeps_the_model(exported, monkeypatch):
    _, proto = exported
    monkeypatch.setattr(onnxsim, "simplify", lambda model, **_: (model, False))
    with pytest.warns(SimplifyWarning, match="check found that the simplified model's outputs"):
        kept, report = simplify(proto)
    assert kept is proto and not report.simplified


def _changing(change):
    real = onnxsim.simplify

    def simplify_and_change(model, **kwargs):
        simplified, ok = real(model, **kwargs)
        change(simplified)
        return simplified, ok

    return simplify_and_change


def _first(proto, op_type):
    return next(n for n in proto.graph.node if n.op_type == op_type)


def test_a_changed_library_node_is_named_and_the_model_kept(block, monkeypatch):
    model, args, _ = block
    proto = _export(model, args, "custom")
    norm = _first(proto, "RmsNorm")

    def change_eps(simplified):
        attribute = next(a for a in _first(simplified, "RmsNorm").attribute if a.name == "eps")
        attribute.f = 1e-3

    monkeypatch.setattr(onnxsim, "simplify", _changing(change_eps))
    with pytest.warns(SimplifyWarning) as caught:
        kept, report = simplify(proto)
    message = str(caught[0].message)
    assert f"node {norm.name!r} (opbridge::RmsNorm) changed attribute(s) ['eps']" in message
    assert "the model is kept as exported" in message
    assert kept is proto and not report.simplified
    with pytest.raises(SimplifyError, match=r"opbridge::RmsNorm\) changed attribute"):
        simplify(proto, strict=True)

    def remove_gelu(simplified):
        simplified.graph.node.remove(_first(simplified, "BiasGelu"))

    monkeypatch.setattr(onnxsim, "simplify", _changing(remove_gelu))
    gelu = _first(proto, "BiasGelu")
    with pytest.warns(SimplifyWarning, match=rf"{gelu.name!r} \(opbridge::BiasGelu\) was removed"):
        simplify(proto)


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    from opbridge.__main__ import main

    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_simplify_prints_counts_and_latency_and_verifies(tmp_path, capsys):
    out = tmp_path / "block.onnx"
    factory = tmp_path / "block.py"
    factory.write_text(
        "from opbridge.demo.models import build_llama_block\n\n\n"
        "def make():\n    return build_llama_block(batch=2, seq=8, dim=32)\n"
    )
    argv = ["export", f"{factory}:make", str(out), "--route", "custom", "--legacy", "--simplify"]
    status, printed, err = _main(argv, capsys)
    assert status == 0, printed + err
    assert (
        "simplified with onnxsim" in printed and "custom-domain nodes kept as exported" in printed
    )
    assert "latency in ONNX Runtime" in printed and "ms as exported" in printed
    assert "ms simplified" in printed
    assert "(route custom, simplified); verification passed" in printed
    written = onnx.load(out)
    assert METADATA_SIMPLIFIED_KEY in _metadata(written)
    model, args = build_llama_block(batch=2, seq=8, dim=32)
    plain = _export(model, args, "custom", dynamo=False)
    assert _library_nodes(written) == _library_nodes(plain)
    line = next(x for x in printed.splitlines() if x.startswith("simplified with"))
    before, after = (int(x) for x in line.split(": ")[1].split(" nodes")[0].split(" -> "))
    assert before == len(plain.graph.node) and after == len(written.graph.node) < before


def test_cli_simplify_with_a_failing_simplifier_writes_the_exported_model(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(onnxsim, "simplify", _raising)
    out = tmp_path / "demo.onnx"
    status, printed, err = _main(
        ["export", "demo", str(out), "--route", "custom", "--simplify"], capsys
    )
    assert status == 0, printed + err
    assert "opbridge export: --simplify: onnxsim failed: RuntimeError: shape inference" in err
    assert "writing the model as exported" in err
    assert "verification passed" in printed and "simplified" not in printed
    assert METADATA_SIMPLIFIED_KEY not in _metadata(onnx.load(out))
