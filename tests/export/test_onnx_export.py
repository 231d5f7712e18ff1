"""Export by both routes with both exporters, then run in ONNX Runtime."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch

import opbridge

from op_cases import OPS
from ort_helpers import LEVELS, run

SPECS = opbridge.specs()


class ScaledClampModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = opbridge.nn.ScaledClamp(1.5, min_val=-1.0, max_val=2.0)

    def forward(self, x):
        return self.act(x)


class RmsNormModel(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.norm = opbridge.nn.RMSNorm(16, eps=1e-5, bias=bias)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            if bias:
                self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        return self.norm(x)


class BothOpsModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = opbridge.nn.RMSNorm(16, bias=True)
        self.fc = torch.nn.Linear(16, 16)
        self.act = opbridge.nn.ScaledClamp(2.0)
        self.norm2 = opbridge.nn.RMSNorm(16)

    def forward(self, x):
        return self.norm2(self.act(self.fc(self.norm(x))))


def _perturb(module, generator=None):
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("weight") and param.dim() == 1:
                param.normal_(1.0, 0.1)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.3)


class AddRmsNormModel(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm = opbridge.nn.AddRMSNorm(16, eps=1e-5, bias=bias)
        _perturb(self.norm)

    def forward(self, x):
        out, residual = self.norm(self.fc(x), x)
        return out + 0.5 * residual


class BiasGeluModel(torch.nn.Module):
    def __init__(self, approximate: str):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16, bias=False)
        self.act = opbridge.nn.BiasGELU(16, approximate=approximate)
        _perturb(self.act)

    def forward(self, x):
        return self.act(self.fc(x))


class RotaryModel(torch.nn.Module):
    """[batch, 5, 16] seen as [batch, seq=5, heads=2, head_dim=8]."""

    def __init__(self, interleaved: bool, rotary_dim: int | None = None):
        super().__init__()
        self.rope = opbridge.nn.RotaryEmbedding(
            8, max_seq_len=16, interleaved=interleaved, rotary_dim=rotary_dim
        )

    def forward(self, x):
        return self.rope(x.unflatten(-1, (2, 8))).flatten(2)


class NormalizeImageModel(torch.nn.Module):
    """[batch, 5, 16] seen as an NHWC image [batch, 5, 4, 4] on the 0..255 scale."""

    def __init__(self):
        super().__init__()
        self.norm = opbridge.nn.NormalizeImage([0.1, 0.2, 0.3, 0.4], [0.5, 1.0, 2.0, 0.25])

    def forward(self, x):
        return self.norm(x.unflatten(-1, (4, 4)) * 40.0)


MODELS = {
    "scaled_clamp": (
        ScaledClampModel,
        {"ScaledClamp": [{"scale": 1.5, "min_val": -1.0, "max_val": 2.0}]},
    ),
    "rms_norm": (lambda: RmsNormModel(bias=False), {"RmsNorm": [{"eps": 1e-5}]}),
    "rms_norm_bias": (lambda: RmsNormModel(bias=True), {"RmsNorm": [{"eps": 1e-5}]}),
    "both": (
        BothOpsModel,
        {
            "RmsNorm": [{"eps": 1e-6}, {"eps": 1e-6}],
            "ScaledClamp": [{"scale": 2.0, "min_val": 0.0, "max_val": 6.0}],
        },
    ),
    "add_rms_norm": (lambda: AddRmsNormModel(bias=False), {"AddRmsNorm": [{"eps": 1e-5}]}),
    "add_rms_norm_bias": (lambda: AddRmsNormModel(bias=True), {"AddRmsNorm": [{"eps": 1e-5}]}),
    "bias_gelu": (lambda: BiasGeluModel("none"), {"BiasGelu": [{"approximate": "none"}]}),
    "bias_gelu_tanh": (lambda: BiasGeluModel("tanh"), {"BiasGelu": [{"approximate": "tanh"}]}),
    "rotary": (lambda: RotaryModel(False), {"RotaryEmbedding": [{"interleaved": 0}]}),
    "rotary_interleaved": (lambda: RotaryModel(True), {"RotaryEmbedding": [{"interleaved": 1}]}),
    "rotary_partial": (lambda: RotaryModel(False, 4), {"RotaryEmbedding": [{"interleaved": 0}]}),
    "normalize_image": (
        NormalizeImageModel,
        {
            "NormalizeImage": [
                {
                    "mean": [0.1, 0.2, 0.3, 0.4],
                    "std": [0.5, 1.0, 2.0, 0.25],
                    "channels_last_in": 1,
                }
            ]
        },
    ),
}
# (exporter, opset): the standard route changes form at opset 23; the legacy
# exporter goes up to opset 20 and before 18 ReduceMean takes axes as an attribute.
CONFIGS = [("dynamo", 18), ("dynamo", 23), ("legacy", 17), ("legacy", 18)]
CONFIG_IDS = [f"{e}-opset{o}" for e, o in CONFIGS]


def _export(model, x, route, exporter, opset, dynamic=False):
    kwargs = {}
    if dynamic:
        kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch", min=1, max=64)},)
    return opbridge.export.export(
        model, (x,), route=route, opset=opset, dynamo=exporter == "dynamo", **kwargs
    )


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize(("exporter", "opset"), CONFIGS, ids=CONFIG_IDS)
def test_export_route(model_name, route, exporter, opset):
    factory, expected_nodes = MODELS[model_name]
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.randn(3, 5, 16) * 3
    proto = _export(model, x, route, exporter, opset, dynamic=True)
    onnx.checker.check_model(proto, full_check=True)

    domains = {imp.domain: imp.version for imp in proto.opset_import}
    assert domains.get("", domains.get("ai.onnx")) == opset
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata["opbridge.version"] == opbridge.__version__
    assert metadata["opbridge.domain_version"] == str(opbridge.ONNX_DOMAIN_VERSION)
    assert metadata["opbridge.route"] == route

    custom_nodes = [n for n in proto.graph.node if n.domain == "opbridge"]
    if route == "standard":
        assert custom_nodes == []
        assert "opbridge" not in domains
        op_types = {n.op_type for n in proto.graph.node}
        if "RmsNorm" in expected_nodes or "AddRmsNorm" in expected_nodes:
            assert ("RMSNormalization" in op_types) == (opset >= 23)
            if opset < 23:
                assert {"Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"} <= op_types
        if "ScaledClamp" in expected_nodes:
            assert "Clip" in op_types
        if "BiasGelu" in expected_nodes:
            # The legacy exporter stops at opset 20; its Gelu form is tested apart.
            assert ("Gelu" in op_types) == (opset >= 20)
            if opset < 20:
                assert "Tanh" in op_types or "Erf" in op_types
        if "RotaryEmbedding" in expected_nodes:
            assert ("RotaryEmbedding" in op_types) == (opset >= 23)
            if opset < 23:
                assert {"Slice", "Concat", "Mul", "Sub"} <= op_types
        if "NormalizeImage" in expected_nodes:
            assert {"Transpose", "Div", "Sub"} <= op_types
    else:
        assert domains["opbridge"] == opbridge.ONNX_DOMAIN_VERSION
        by_type = {}
        for node in custom_nodes:
            by_type.setdefault(node.op_type, []).append(_attrs(node))
        assert sorted(by_type) == sorted(expected_nodes)
        for op_type, attr_list in expected_nodes.items():
            spec = next(s for s in SPECS.values() if s["onnx_type"] == op_type)
            names = sorted(a["name"] for a in spec["attrs"])
            assert len(by_type[op_type]) == len(attr_list)
            for got, want in zip(by_type[op_type], attr_list, strict=True):
                assert sorted(got) == names
                for key, value in want.items():
                    if isinstance(value, str):
                        assert got[key].decode() == value, (op_type, key)
                    else:
                        assert got[key] == pytest.approx(value, rel=1e-7), (op_type, key)

    with torch.no_grad():
        for batch in (3, 1, 7):
            xb = torch.randn(batch, 5, 16) * 3
            expected = model(xb).numpy()
            for level in LEVELS:
                (got,) = run(proto, [xb.numpy()], level)
                np.testing.assert_allclose(
                    got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{level} batch {batch}"
                )


def test_translation_table_with_plain_torch_onnx_export():
    model = BothOpsModel().eval()
    x = torch.randn(2, 16)
    program = torch.onnx.export(
        model,
        (x,),
        dynamo=True,
        custom_translation_table=opbridge.export.translation_table("custom"),
    )
    types = [
        (n.domain, n.op_type) for n in program.model_proto.graph.node if n.domain == "opbridge"
    ]
    assert types == [("opbridge", "RmsNorm"), ("opbridge", "ScaledClamp"), ("opbridge", "RmsNorm")]
    (got,) = run(program.model_proto, [x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_legacy_symbolics_with_plain_torch_onnx_export():
    model = BothOpsModel().eval()
    x = torch.randn(2, 16)
    opbridge.export.register_legacy_symbolics("standard", opset=17)
    buffer = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buffer.getvalue())
    assert not [n for n in proto.graph.node if n.domain == "opbridge"]
    (got,) = run(proto, [x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_export_writes_file_and_rejects_unknown_route(tmp_path):
    model = ScaledClampModel().eval()
    path = tmp_path / "m.onnx"
    opbridge.export.export(model, (torch.randn(2, 3),), path, route="standard")
    assert onnx.load(path).metadata_props
    with pytest.raises(ValueError, match="route must be one of"):
        opbridge.export.export(model, (torch.randn(2, 3),), route="fastest")


def test_custom_route_float64_runs():
    model = RmsNormModel(bias=True).double().eval()
    x = torch.randn(4, 16, dtype=torch.float64)
    proto = opbridge.export.export(model, (x,), route="custom")
    (got,) = run(proto, [x.numpy()])
    ref = OPS["rms_norm"].reference(x, model.norm.weight, model.norm.bias, 1e-5).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_standard_route_uses_gelu_at_opset_20_with_legacy_exporter(approximate):
    model = BiasGeluModel(approximate).eval()
    x = torch.randn(3, 5, 16) * 3
    proto = _export(model, x, "standard", "legacy", 20)
    onnx.checker.check_model(proto, full_check=True)
    gelus = [n for n in proto.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == 1 and _attrs(gelus[0])["approximate"].decode() == approximate
    with torch.no_grad():
        (got,) = run(proto, [x.numpy()])
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)


class TwoOutputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = opbridge.nn.AddRMSNorm(16, bias=True)
        _perturb(self.norm)

    def forward(self, x, residual):
        return self.norm(x, residual)


@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_add_rms_norm_two_graph_outputs(route, exporter):
    model = TwoOutputs().eval()
    x, residual = torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    proto = opbridge.export.export(
        model, (x, residual), route=route, opset=18, dynamo=exporter == "dynamo"
    )
    onnx.checker.check_model(proto, full_check=True)
    assert len(proto.graph.output) == 2
    custom = [n for n in proto.graph.node if n.domain == "opbridge"]
    if route == "custom":
        assert [n.op_type for n in custom] == ["AddRmsNorm"] and len(custom[0].output) == 2
    else:
        assert custom == []
    with torch.no_grad():
        expected = [t.numpy() for t in model(x, residual)]
    for level in LEVELS:
        got = run(proto, [x.numpy(), residual.numpy()], level)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


class Uint8ImageModel(torch.nn.Module):
    def __init__(self, channels_last_in: bool):
        super().__init__()
        self.norm = opbridge.nn.NormalizeImage(
            (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), channels_last_in=channels_last_in
        )

    def forward(self, image):
        return self.norm(image)


@pytest.mark.parametrize("channels_last_in", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize(("exporter", "opset"), CONFIGS, ids=CONFIG_IDS)
def test_normalize_image_uint8_export(channels_last_in, route, exporter, opset):
    model = Uint8ImageModel(channels_last_in).eval()
    shape = (2, 8, 6, 3) if channels_last_in else (2, 3, 8, 6)
    image = torch.randint(0, 256, shape, dtype=torch.uint8)
    proto = opbridge.export.export(
        model,
        (image,),
        route=route,
        opset=opset,
        dynamo=exporter == "dynamo",
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},),
    )
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    op_types = [n.op_type for n in proto.graph.node]
    if route == "custom":
        (node,) = [n for n in proto.graph.node if n.domain == "opbridge"]
        assert node.op_type == "NormalizeImage"
        assert _attrs(node)["channels_last_in"] == int(channels_last_in)
        assert _attrs(node)["std"] == pytest.approx([0.229, 0.224, 0.225])
    else:
        assert "Cast" in op_types and ("Transpose" in op_types) == channels_last_in
    for batch in (1, 7):
        batch_image = torch.randint(0, 256, (batch, *shape[1:]), dtype=torch.uint8)
        expected = model(batch_image).numpy()
        for level in LEVELS:
            (got,) = run(proto, [batch_image.numpy()], level)
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


class _CardCall(torch.nn.Module):
    """A sample call of an operator with its tensors as the inputs."""

    def __init__(self, call, sample):
        super().__init__()
        self.call, self.sample = call, sample

    def forward(self, *tensors):
        given = iter(tensors)
        args = [next(given) if isinstance(a, torch.Tensor) else a for a in self.sample.args]
        return self.call(*args, **self.sample.kwargs)


# The legacy exporter is quick: every typical sample by both routes. The
# dynamo exporter (slow): the first typical sample by the card's standard route.
CARD_CONFIGS = [("legacy", 17, "custom"), ("legacy", 17, "standard"), ("dynamo", 23, "standard")]


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize(
    ("exporter", "opset", "route"), CARD_CONFIGS, ids=["-".join(map(str, c)) for c in CARD_CONFIGS]
)
def test_every_card_exports_by_both_routes(name, exporter, opset, route):
    """Each card's typical samples, exported and run in ONNX Runtime."""
    case = OPS[name]
    typical = [s for s in case.samples(torch.float32, large=False) if s.label.startswith("typical")]
    assert typical
    for sample in typical[:1] if exporter == "dynamo" else typical:
        tensors = tuple(a for a in sample.args if isinstance(a, torch.Tensor))
        proto = opbridge.export.export(
            _CardCall(case.call, sample).eval(),
            tensors,
            route=route,
            opset=opset,
            dynamo=exporter == "dynamo",
        )
        assert any(n.domain == "opbridge" for n in proto.graph.node) == (route == "custom")
        outputs = run(proto, [t.numpy() for t in tensors])
        expected = case.reference(*sample.args, **sample.kwargs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert len(outputs) == len(expected), sample.label
        for got, want in zip(outputs, expected, strict=True):
            np.testing.assert_allclose(
                got, want.numpy(), rtol=1e-5, atol=1e-5, err_msg=sample.label
            )


@pytest.mark.parametrize("dynamo", [True, False])
def test_dynamic_batch_makes_dimension_zero_symbolic(dynamo):
    model = opbridge.nn.RMSNorm(8).eval()
    proto = opbridge.export.export(
        model, (torch.randn(2, 3, 8),), route="custom", dynamic_batch=True, dynamo=dynamo
    )
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].HasField("dim_value")
    assert [d.dim_value for d in dims[1:]] == [3, 8]
    with pytest.raises(TypeError, match="not both"):
        opbridge.export.export(
            model,
            (torch.randn(2, 3, 8),),
            route="custom",
            dynamic_batch=True,
            dynamic_shapes=({0: 2},),
        )


def test_route_is_a_required_keyword():
    with pytest.raises(TypeError, match="route"):
        opbridge.export.export(opbridge.nn.RMSNorm(8), (torch.randn(2, 8),))


@pytest.mark.parametrize("route", ["custom", "standard"])
def test_legacy_export_has_no_unused_custom_opset_warning(capfd, route):
    # torch's C++ exporter writes the warning to stderr for a custom opset the
    # graph does not use: a model without opbridge nodes, or any standard-route one.
    capfd.readouterr()
    proto = opbridge.export.export(
        torch.nn.Linear(4, 4), (torch.randn(2, 4),), route=route, dynamo=False, verbose=False
    )
    assert "Custom opset domain" not in capfd.readouterr().err
    assert [imp.domain for imp in proto.opset_import] == [""]


def test_legacy_export_imports_a_library_domain_at_the_library_version(monkeypatch):
    import dataclasses

    import opbridge.export.metadata as export_module

    builtin = export_module.library_for_domain("opbridge")
    bumped = dataclasses.replace(builtin, domain_version=builtin.domain_version + 2)
    monkeypatch.setattr(
        export_module,
        "library_for_domain",
        lambda domain: bumped if domain == "opbridge" else None,
    )
    proto = opbridge.export.export(
        RmsNormModel(bias=False),
        (torch.randn(2, 16),),
        route="custom",
        dynamo=False,
        verbose=False,
    )
    versions = {imp.domain: imp.version for imp in proto.opset_import}
    assert versions["opbridge"] == bumped.domain_version
