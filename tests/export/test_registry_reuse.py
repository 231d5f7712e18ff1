"""opbridge.export.export builds torch's ONNX registry once per opset and
hands each dynamo export a copy (opbridge.export.registry): the models are
the same as with a registry built afresh, one export's custom translations
do not reach the next, and torch's own method is back afterwards."""

from __future__ import annotations

import io

import onnx
import torch
from torch.onnx._internal.exporter import _registration

import opbridge
from opbridge.export import registry


@torch.library.custom_op("registry_reuse_test::noop", mutates_args=())
def noop(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class Model(torch.nn.Module):
    def forward(self, x, w):
        return torch.tanh(opbridge.rms_norm(x, w, eps=1e-5)) * 2


def _export(opset: int) -> onnx.ModelProto:
    buffer = io.BytesIO()
    opbridge.export.export(
        Model(), (torch.randn(2, 3, 8), torch.rand(8)), buffer, route="standard", opset=opset
    )
    return onnx.load_from_string(buffer.getvalue())


def test_a_reused_registry_exports_the_same_model_as_a_fresh_one(monkeypatch):
    reused = [_export(18), _export(18), _export(23)]
    # torch's own method every time: the registry built afresh per export.
    monkeypatch.setattr(registry, "_registry_class", lambda: None)
    fresh = [_export(18), _export(23)]
    assert reused[0] == reused[1] == fresh[0]
    assert reused[2] == fresh[1]
    assert len(reused[0].graph.node) > 1 and reused[0].opset_import != reused[2].opset_import


def test_the_registry_is_built_once_per_opset_and_each_export_gets_its_own(monkeypatch):
    built = []
    original = _registration.ONNXRegistry.__dict__["from_torchlib"]

    def counting(cls, *args, **kwargs):
        built.append(kwargs.get("opset_version", args[0] if args else None))
        return original.__func__(cls, *args, **kwargs)

    monkeypatch.setattr(_registration.ONNXRegistry, "from_torchlib", classmethod(counting))
    monkeypatch.setattr(registry, "_TEMPLATES", {})
    with registry.reused_torchlib_registry():
        first = _registration.ONNXRegistry.from_torchlib(opset_version=18)
        target = torch.ops.registry_reuse_test.noop.default
        assert not first.is_registered(target)
        first.register_op(target, lambda *args: None)
        second = _registration.ONNXRegistry.from_torchlib(opset_version=18)
        third = _registration.ONNXRegistry().from_torchlib(opset_version=23)
    assert built == [18, 23]
    assert first.is_registered(target) and not second.is_registered(target)
    fresh = original.__func__(_registration.ONNXRegistry, opset_version=18)
    assert second.functions == fresh.functions
    assert first.functions.keys() - second.functions.keys() == {target.name()}
    assert second.opset_version == 18 and third.opset_version == 23
    assert _registration.ONNXRegistry.__dict__["from_torchlib"].__func__ is counting


def test_torchs_method_is_back_after_an_export_and_after_a_failed_one():
    original = _registration.ONNXRegistry.__dict__["from_torchlib"]
    _export(18)
    assert _registration.ONNXRegistry.__dict__["from_torchlib"] is original
    try:
        with registry.reused_torchlib_registry():
            with registry.reused_torchlib_registry():
                assert _registration.ONNXRegistry.__dict__["from_torchlib"] is not original
            assert _registration.ONNXRegistry.__dict__["from_torchlib"] is not original
            raise KeyError("raised inside")
    except KeyError:
        pass
    assert _registration.ONNXRegistry.__dict__["from_torchlib"] is original
