"""opbridge.patch on timm models (random init, nothing downloaded).

timm imports torchvision; these tests run in their own environment
(``./dev timm``: torch and torchvision at the pins of requirements-timm.txt,
opbridge built against that torch), not in the main one."""

from __future__ import annotations

import copy

import pytest
import timm
import torch

import opbridge

SUBCLASS = "LayerNorm subclass"
GELU = "linear + GELU"
BLOCK = "residual add + norm (timm Block)"

# label -> (timm model name, create_model kwargs, expected replacements,
# custom-route opbridge node types)
MODELS = {
    "vit": (
        "vit_tiny_patch16_224",
        {"img_size": 64, "depth": 2},
        {SUBCLASS: 5, GELU: 4, BLOCK: 2},
        {"LayerNorm", "AddLayerNorm", "BiasGelu"},
    ),
    "deit": (
        "deit_tiny_patch16_224",
        {"img_size": 64, "depth": 2},
        {SUBCLASS: 5, GELU: 4, BLOCK: 2},
        {"LayerNorm", "AddLayerNorm", "BiasGelu"},
    ),
    # ConvNeXt with its MLP as 1x1 convolutions over NCHW (atto's default):
    # channel norms only; the GELU between convolutions is left.
    "convnext-conv-mlp": (
        "convnext_atto",
        {"depths": (1, 1, 1, 1)},
        {SUBCLASS: 9},
        {"LayerNorm"},
    ),
    # ConvNeXt with linear MLPs over NHWC: block norms over the last
    # dimension, bias + GELU.
    "convnext": (
        "convnext_atto",
        {"depths": (1, 1, 1, 1), "conv_mlp": False},
        {SUBCLASS: 9, GELU: 8},
        {"LayerNorm", "BiasGelu"},
    ),
    "resnet": ("resnet18", {}, {}, set()),
}


def build(label: str):
    name, kwargs, _, _ = MODELS[label]
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm) and module.weight is not None:
                module.weight.add_(0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.add_(0.2 * torch.randn(module.bias.shape, generator=generator))
    size = 64
    example = (torch.randn(2, 3, size, size, generator=generator),)
    return model, copy.deepcopy(model), example


@pytest.fixture(scope="module", params=sorted(MODELS))
def patched(request):
    model, reference, example = build(request.param)
    opbridge.patch(model)
    return request.param, model, reference, example


def test_patch_replaces_the_expected_modules(patched):
    name, model, _, _ = patched
    summary = model.opbridge_patch_summary
    assert summary.counts() == MODELS[name][2], str(summary)
    assert not summary.skipped


def test_patched_outputs_match_the_unpatched_model(patched):
    _, model, reference, example = patched
    with torch.no_grad():
        torch.testing.assert_close(model(*example), reference(*example), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("route", ["custom", "standard"])
def test_export_with_dynamic_batch_verifies_against_the_unpatched_model(patched, route):
    name, model, reference, example = patched
    report = opbridge.verify(model, example, route=route, reference=reference, draws=2)
    assert report.passed, str(report)
    proto = report.onnx_model
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    found = {n.op_type for n in proto.graph.node if n.domain == opbridge.ONNX_DOMAIN}
    assert found == (MODELS[name][3] if route == "custom" else set())


def test_unpatch_restores_bitwise_outputs(patched):
    name, model, reference, example = patched
    restored = copy.deepcopy(model)
    opbridge.unpatch(restored)
    assert len(restored.opbridge_patch_summary) == sum(MODELS[name][2].values())
    with torch.no_grad():
        assert torch.equal(restored(*example), reference(*example))


def test_channel_norm_becomes_layer_norm_2d():
    model, _, _ = build("convnext-conv-mlp")
    opbridge.patch(model)
    norm = model.stem[1]
    assert type(norm) is opbridge.nn.LayerNorm2d


def test_image_model_reads_mean_and_std_from_pretrained_cfg():
    model, reference, _ = build("resnet")
    wrapped = opbridge.nn.ImageModel(model)
    assert wrapped.normalize.mean == list(model.pretrained_cfg["mean"])
    image = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    mean = torch.tensor(model.pretrained_cfg["mean"])[:, None, None]
    std = torch.tensor(model.pretrained_cfg["std"])[:, None, None]
    pixels = (image.permute(0, 3, 1, 2).float() / 255 - mean) / std
    with torch.no_grad():
        torch.testing.assert_close(wrapped(image), reference(pixels), rtol=1e-4, atol=1e-4)
    report = opbridge.verify(wrapped.eval(), (image,), route="custom", draws=1)
    assert report.passed, str(report)
    found = {n.op_type for n in report.onnx_model.graph.node if n.domain == opbridge.ONNX_DOMAIN}
    assert found == {"NormalizeImage"}
