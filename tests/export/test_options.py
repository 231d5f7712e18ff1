"""Export's and verify's settings as options objects, the keywords still
taken (and winning over the object), and route="auto" as a resolver that
export calls without importing it."""

import pytest
import torch

import opbridge
from opbridge.export import ExportOptions
from opbridge.verify import Sweep, VerifyOptions


def _model_and_inputs():
    return opbridge.nn.RMSNorm(8).eval(), (torch.randn(3, 8),)


def _opset(proto) -> int:
    return next(imp.version for imp in proto.opset_import if imp.domain in ("", "ai.onnx"))


def test_export_options_and_keywords():
    model, args = _model_and_inputs()
    options = ExportOptions(opset=20, dynamo=False)
    assert _opset(opbridge.export.export(model, args, route="standard", options=options)) == 20
    # A keyword wins over the options object; opset_version is torch's name for opset.
    proto = opbridge.export.export(model, args, route="standard", options=options, opset=17)
    assert _opset(proto) == 17
    proto = opbridge.export.export(model, args, route="standard", opset_version=19, dynamo=False)
    assert _opset(proto) == 19
    with pytest.raises(TypeError, match="got opset=17 and opset_version=19"):
        opbridge.export.export(model, args, route="standard", opset=17, opset_version=19)
    # The default is in one place.
    assert ExportOptions().opset == opbridge.export.DEFAULT_OPSET == 18


def test_verify_options_and_keywords_give_the_same_run():
    model, args = _model_and_inputs()
    options = VerifyOptions(sweep=Sweep(draws=1, levels=["disable_all", "enable_all"]))
    by_options = opbridge.verify(model, args, route="custom", options=options)
    by_keywords = opbridge.verify(
        model, args, route="custom", draws=1, levels=["disable_all", "enable_all"]
    )
    assert by_options.passed and by_keywords.passed
    assert [(c.case, c.level) for c in by_options.cells] == [
        (c.case, c.level) for c in by_keywords.cells
    ]
    # verify's export defaults to a dynamic batch; a keyword turns it off.
    assert by_options.dynamic_batch
    static = opbridge.verify(model, args, route="custom", options=options, dynamic_batch=False)
    assert not static.dynamic_batch
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['draw'\]"):
        opbridge.verify(model, args, route="custom", draw=1)


def test_auto_is_resolved_by_the_registered_resolver(monkeypatch):
    from opbridge import export as export_module

    seen = {}

    def resolver(model, args, options):
        seen["options"] = options
        return {"rms_norm": "standard"}

    monkeypatch.setitem(export_module._RESOLVERS, "auto", resolver)
    model, args = _model_and_inputs()
    proto = opbridge.export.export(model, args, route="auto", opset=20, requires_library=False)
    assert seen["options"] == ExportOptions(opset=20, requires_library=False)
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata["opbridge.route.opbridge::rms_norm"] == "standard"
    # The real resolver is autoroute's (registered when opbridge is imported).
    monkeypatch.undo()
    assert export_module._RESOLVERS["auto"].__module__ == "opbridge.autoroute"
