"""opbridge.patch on Hugging Face model families: tiny random-init models
built from configs (nothing downloaded), patched in one call."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.models.gemma import modeling_gemma
from transformers.models.llama import modeling_llama

import opbridge
from opbridge.integrations import hf

NORM = "RMSNorm-like"
DECODER = "residual add + RMSNorm (decoder layer)"
ROTARY = "rotary embedding (apply_rotary_pos_emb)"
LAYER_NORM = "torch.nn.LayerNorm"
GELU = "linear + GELU"
POST_NORM = "residual add + LayerNorm (post-norm output)"
VIT_LAYER = "residual add + LayerNorm (ViT layer)"
LLAMA_LIKE = ({NORM: 3, DECODER: 1, ROTARY: 1}, {"RmsNorm", "AddRmsNorm", "RotaryEmbedding"})

# family -> (replacements expected in one layer, custom-route opbridge node types)
EXPECTED = {
    "llama": LLAMA_LIKE,
    "mistral": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,
    "qwen3": ({NORM: 5, DECODER: 1, ROTARY: 1}, LLAMA_LIKE[1]),  # q and k norms
    "gemma": LLAMA_LIKE,
    "gemma2": ({NORM: 5, DECODER: 1, ROTARY: 1}, LLAMA_LIKE[1]),
    "phi3": LLAMA_LIKE,
    "t5": ({NORM: 3}, {"RmsNorm"}),
    "bert": ({LAYER_NORM: 3, GELU: 2, POST_NORM: 2}, {"LayerNorm", "AddLayerNorm", "BiasGelu"}),
    "gpt2": ({LAYER_NORM: 3, GELU: 2}, {"LayerNorm", "BiasGelu"}),
    "vit": ({LAYER_NORM: 3, GELU: 2, VIT_LAYER: 1}, {"LayerNorm", "AddLayerNorm", "BiasGelu"}),
}


def test_every_family_is_tested():
    assert sorted(EXPECTED) == sorted(hf.FAMILIES)


def build(family: str):
    """(model, an unpatched copy, example), both models as ``hf.Output``."""
    model = hf.random_model(family)
    output = hf.FAMILIES[family][1]
    example = hf.example_inputs(model, batch=2, seq=7)
    return hf.Output(model, output), hf.Output(copy.deepcopy(model), output), example


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def patched(request):
    model, reference, example = build(request.param)
    opbridge.patch(model.model)
    return request.param, model, reference, example


def test_patch_replaces_the_expected_modules(patched):
    family, model, _, _ = patched
    summary = model.model.opbridge_patch_summary
    assert summary.counts() == EXPECTED[family][0], str(summary)
    assert not summary.skipped


def test_patched_outputs_match_the_unpatched_model(patched):
    _, model, reference, example = patched
    with torch.no_grad():
        torch.testing.assert_close(model(*example), reference(*example), rtol=1e-5, atol=1e-5)


# The function route on one family per set of library ops (its bodies are
# the ops', whatever model holds them): LLaMA's and gemma2's RmsNorm,
# AddRmsNorm and RotaryEmbedding (gemma2 with its extra norms), BERT's
# LayerNorm, AddLayerNorm and BiasGelu; the custom and standard routes on all.
FUNCTION_FAMILIES = ("bert", "gemma2", "llama")
ROUTES = [(f, r) for f in sorted(EXPECTED) for r in ("custom", "standard")]
ROUTES += [(f, "function") for f in FUNCTION_FAMILIES]


@pytest.mark.parametrize(("patched", "route"), ROUTES, indirect=["patched"])
def test_export_with_dynamic_batch_and_sequence_verifies_against_the_unpatched_model(
    patched, route
):
    family, model, reference, example = patched
    report = opbridge.verify(
        model, example, route=route, reference=reference, dynamic_sequence=family != "vit"
    )
    assert report.passed, str(report)
    proto = report.onnx_model
    dims = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] and (family == "vit" or dims[1]), dims
    found = {n.op_type for n in proto.graph.node if n.domain == opbridge.ONNX_DOMAIN}
    assert found == (EXPECTED[family][1] if route != "standard" else set())
    if route == "function":
        # Every library node has a body, and the bodies ran without the library.
        assert {f.name for f in proto.functions} == found
        checks = {c.name: c.status for c in report.structure}
        assert checks["function bodies (no library) match PyTorch and the kernels"] == "pass"
    # The sweep ran other batch sizes and, for token inputs, another length.
    assert {c.case for c in report.cells} >= {"batch 1", "batch 16"}
    if family != "vit":
        assert any(c.case.startswith("sequence") for c in report.cells)


def test_unpatch_restores_bitwise_outputs(patched):
    family, model, reference, example = patched
    copy_ = copy.deepcopy(model)
    opbridge.unpatch(copy_.model)
    assert len(copy_.model.opbridge_patch_summary) == sum(EXPECTED[family][0].values())
    with torch.no_grad():
        assert torch.equal(copy_(*example), reference(*example))


def test_fused_forwards_are_scoped_to_the_patched_model():
    model, _, _ = build("llama")
    other, _, _ = build("llama")
    opbridge.patch(model.model)
    attention = model.model.model.layers[0].self_attn
    assert type(attention) is not modeling_llama.LlamaAttention
    assert isinstance(attention, modeling_llama.LlamaAttention)
    assert type(other.model.model.layers[0].self_attn) is modeling_llama.LlamaAttention
    assert modeling_llama.apply_rotary_pos_emb.__module__ == modeling_llama.__name__
    assert model.model.state_dict().keys() == other.model.state_dict().keys()
    opbridge.unpatch(model.model)
    assert type(attention) is modeling_llama.LlamaAttention


def test_gemma_norm_as_a_plain_rms_norm_is_refused_with_the_path():
    model, _, _ = build("gemma")
    rule = opbridge.patching.rms_norm_rule(modeling_gemma.GemmaRMSNorm)
    with pytest.raises(
        opbridge.patching.PatchError,
        match=r"model\.layers\.0\.input_layernorm \(GemmaRMSNorm\).*differ by up to",
    ):
        opbridge.patch(model.model, rules=[rule])
    assert type(model.model.model.layers[0].input_layernorm) is modeling_gemma.GemmaRMSNorm


def test_summary_lists_what_was_seen_and_left():
    model, _, _ = build("gemma")
    opbridge.patch(model.model)
    left = {s.path: s.reason for s in model.model.opbridge_patch_summary.left}
    assert left == {"model.layers.0.mlp.act_fn": "no biased linear layer feeds it"}
    assert "left (1):" in str(model.model.opbridge_patch_summary)


def test_patched_model_trains():
    model, _, example = build("llama")
    opbridge.patch(model.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = torch.randint(0, 96, example[0].shape)
    losses = []
    model.train()
    for _ in range(8):
        optimizer.zero_grad()
        logits = model(*example)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_image_model_normalizes_in_front():
    model, reference, _ = build("vit")
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    wrapped = opbridge.nn.ImageModel(model, mean, std, channels_last_in=True)
    image = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8)
    pixels = (image.permute(0, 3, 1, 2).float() / 255 - torch.tensor(mean)[:, None, None]) / (
        torch.tensor(std)[:, None, None]
    )
    with torch.no_grad():
        torch.testing.assert_close(wrapped(image), reference(pixels), rtol=1e-4, atol=1e-4)


def test_patch_in_training_mode_probes_with_dropout_off():
    model = hf.random_model("bert")
    model.train()
    opbridge.patch(model)
    assert model.opbridge_patch_summary.counts() == EXPECTED["bert"][0]
    assert all(m.training for m in model.modules())


def test_patched_model_compiles_without_graph_breaks():
    import torch._dynamo

    model, reference, example = build("llama")
    opbridge.patch(model.model)
    explained = torch._dynamo.explain(model)(*example)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*example), reference(*example), rtol=1e-5, atol=1e-5)
