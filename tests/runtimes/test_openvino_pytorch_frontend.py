"""OpenVINO's PyTorch frontend with opbridge's extension library: a
torch.export program (and a TorchScript model) that calls opbridge's
operators converts with ``openvino.convert_model(..., extension=[path])``,
a two-output operator included, and transformers' ``OpenVINOExporter``
converts a patched Llama with no opbridge call: importing opbridge hands it
the extension when transformers' exporter is imported, whichever comes
first."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import opbridge
from opbridge.ops import card, cards
from opbridge.ops.call import OpCall

ov = pytest.importorskip("openvino")
openvino_runtime = pytest.importorskip("opbridge.runtimes.openvino")
if not opbridge.libraries()[0].adapter_path("openvino").is_file():
    pytest.skip("libopbridge_openvino.so was not built", allow_module_level=True)

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def convert(model, **kwargs):
    return ov.convert_model(model, extension=[openvino_runtime.get_library_path()], **kwargs)


def run(converted, inputs) -> list[np.ndarray]:
    compiled = ov.Core().compile_model(converted, "CPU", F32)
    results = compiled([t.numpy() for t in inputs])
    return [np.asarray(results[port]) for port in compiled.outputs]


def outputs_of(module, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        want = module(*inputs)
    return [w.numpy() for w in (want if isinstance(want, tuple | list) else (want,))]


def worst(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    assert len(got) == len(want)
    return max(
        float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max())
        for g, w in zip(got, want, strict=True)
    )


def op_types(converted) -> set[str]:
    return {op.get_type_name() for op in converted.get_ordered_ops()}


class Block(torch.nn.Module):
    """A residual step, rotary embedding and a final norm: both outputs of
    add_rms_norm are used, the sum twice."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)
        self.norm = opbridge.nn.AddRMSNorm(32, eps=1e-5, bias=True)
        self.rotary = opbridge.nn.RotaryEmbedding(8, max_seq_len=16)
        self.final = opbridge.nn.RMSNorm(32)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.1, 0.1)

    def forward(self, x, residual):
        y, total = self.norm(self.proj(x), residual)
        rotated = self.rotary(y.view(x.shape[0], x.shape[1], 4, 8)).reshape(x.shape)
        return self.final(rotated) + total, total


def block_and_inputs():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 5, 32), torch.randn(2, 5, 32))


def test_a_torch_export_program_converts_with_the_extension():
    block, inputs = block_and_inputs()
    converted = convert(torch.export.export(block, inputs))
    types = op_types(converted)
    assert {"AddRmsNorm", "RotaryEmbedding", "RmsNorm"} <= types
    # The two outputs' sequence is gone once getitem has taken its elements.
    assert not {t for t in types if "Framework" in t or "Sequence" in t}
    assert worst(run(converted, inputs), outputs_of(block, inputs)) <= 1e-4


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_a_torchscript_model_converts_with_the_extension():
    block, inputs = block_and_inputs()
    converted = convert(block, example_input=inputs)
    assert {"AddRmsNorm", "RotaryEmbedding", "RmsNorm"} <= op_types(converted)
    assert worst(run(converted, inputs), outputs_of(block, inputs)) <= 1e-4


def typical(op: str):
    samples = card(op).samples(torch.float32, large=False)
    return next(s for s in samples if s.label.startswith("typical"))


@pytest.mark.parametrize("op", sorted(cards()))
def test_every_operator_converts_from_torch_export(op):
    """The typical sample of each op: its attributes (float, bool, string,
    float list) given or left at their defaults, absent optional inputs."""
    sample = typical(op)
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args)
    module = OpCall(card(op).call, args, sample.kwargs).eval()
    inputs = tuple(args[p] for p in module.positions)
    converted = convert(torch.export.export(module, inputs))
    assert worst(run(converted, inputs), outputs_of(module, inputs)) <= 1e-5


def fx_decoder(function, inputs=None):
    """The FX graph of ``function(x, weight, bias)`` as torch.fx traces it,
    with the shapes and dtypes of ``inputs`` where given."""
    from openvino.frontend.pytorch.fx_decoder import TorchFXPythonDecoder
    from torch.fx.passes.shape_prop import ShapeProp

    class Call(torch.nn.Module):
        def forward(self, x, weight, bias):
            return function(x, weight, bias)

    graph = torch.fx.symbolic_trace(Call())
    if inputs is not None:
        ShapeProp(graph).propagate(*inputs)
    return TorchFXPythonDecoder(graph)


def test_arguments_given_by_keyword_are_read():
    """An FX graph of torch.fx.symbolic_trace keeps keyword arguments: a
    tensor, None and an attribute by keyword are each taken."""
    rms_norm = torch.ops.opbridge.rms_norm.default
    inputs = (torch.randn(4, 16), torch.rand(16) + 0.5, torch.randn(16))
    x, weight, _ = inputs
    for function, want in [
        (lambda x, w, b: rms_norm(x, w, bias=b, eps=1e-2), rms_norm(*inputs, 1e-2)),
        # The bias input stays used, so that the model keeps its parameter.
        (
            lambda x, w, b: rms_norm(x, w, bias=None, eps=1e-2) + 0 * b,
            rms_norm(x, weight, None, 1e-2),
        ),
    ]:
        (got,) = run(convert(fx_decoder(function, inputs)), inputs)
        assert np.abs(got - want.numpy()).max() <= 1e-5


def test_a_missing_required_attribute_is_a_clear_error():
    scaled_clamp = torch.ops.opbridge.scaled_clamp.default
    message = "argument 'scale' must be a constant float: it has no default"
    with pytest.raises(Exception, match=message):
        convert(fx_decoder(lambda x, w, b: scaled_clamp(x) + w + b))


def test_transformers_openvino_exporter_converts_a_patched_llama():
    transformers = pytest.importorskip("transformers")
    exporters = pytest.importorskip("transformers.exporters")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(input_ids=ids).logits.numpy()
    opbridge.patch(model)

    # Handed over when transformers' exporter was imported: no call needed.
    path = openvino_runtime.get_library_path()
    assert path in exporters.exporter_openvino._OV_CONVERSION_EXTENSIONS
    assert openvino_runtime.register_with_transformers() == []  # once only

    exported = exporters.OpenVINOExporter().export(
        model, {"input_ids": ids}, config=exporters.OpenVINOConfig()
    )
    assert {"AddRmsNorm", "RmsNorm", "RotaryEmbedding"} <= op_types(exported.program)
    compiled = ov.Core().compile_model(exported.program, "CPU", F32)
    got = compiled({"input_ids": ids.numpy()})[compiled.output("logits")]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


ORDERS = {
    "opbridge first": "import opbridge\nfrom transformers.exporters import exporter_openvino\n",
    "transformers first": "from transformers.exporters import exporter_openvino\nimport opbridge\n",
}


@pytest.mark.parametrize("order", ORDERS)
def test_transformers_exporter_gets_the_extensions_whichever_is_imported_first(order):
    pytest.importorskip("transformers.exporters")
    code = ORDERS[order] + (
        "import sys\n"
        "path = opbridge.runtimes.openvino.get_library_path()\n"
        "assert exporter_openvino._OV_CONVERSION_EXTENSIONS.count(path) == 1\n"
        "finders = [type(f).__name__ for f in sys.meta_path]\n"
        "assert '_TransformersFinder' not in finders, finders\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_a_transformers_without_the_list_is_a_warning_not_an_error(monkeypatch):
    exporters = pytest.importorskip("transformers.exporters")
    monkeypatch.delattr(exporters.exporter_openvino, "_OV_CONVERSION_EXTENSIONS")
    with pytest.warns(UserWarning, match="OpenVINOExporter will not convert opbridge's operators"):
        openvino_runtime._register_with_transformers_quietly()
    with pytest.raises(RuntimeError, match="_OV_CONVERSION_EXTENSIONS"):
        openvino_runtime.register_with_transformers()
