"""Hugging Face models through opbridge: what exporting one needs besides
``opbridge.patch``.

``opbridge.patch(model)`` adopts a transformers model by itself (norms, q/k
norms, residual add + norm, rotary embedding, bias + GELU; see
:func:`opbridge.patch`). What this module adds is the export side: a model
that takes one tensor and returns one (:class:`Output`), example inputs from
the model's config (:func:`example_inputs`) and ``dynamic_shapes`` for batch
and sequence (:func:`dynamic_shapes`). transformers is not imported here:
everything reads the model's ``config`` attributes.

Recipe (see docs/guides/huggingface.md): build or load the model with ``use_cache=False``
in its config (a cache object is not an ONNX output), ``.eval()``; patch it;
export ``Output(model, "logits")`` with an example batch of at least 2 and
``dynamic_shapes(...)``; verify against a copy taken before patching.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Output(nn.Module):
    """``model(**{input_name: x}).<output>``: one tensor in, one tensor out,
    for export (``output`` is ``"logits"`` for ``*ForCausalLM`` /
    ``*ForImageClassification`` models, ``"last_hidden_state"`` for base
    models; ``input_name`` is ``"input_ids"`` or ``"pixel_values"``)."""

    def __init__(self, model: nn.Module, output: str = "logits", input_name: str | None = None):
        super().__init__()
        self.model = model
        self.output = output
        self.input_name = input_name or _input_name(model)
        self.train(model.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.model(**{self.input_name: x})
        value = getattr(result, self.output, None)
        if value is None and isinstance(result, dict):
            value = result.get(self.output)
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"opbridge.integrations.hf.Output: {type(self.model).__name__} returned no tensor "
                "named "
                f"{self.output!r} (got {type(result).__name__})"
            )
        return value

    def extra_repr(self) -> str:
        return f"output={self.output!r}, input_name={self.input_name!r}"


def _config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(
            f"opbridge.integrations.hf: {type(model).__name__} has no config attribute; expected a "
            "transformers PreTrainedModel"
        )
    return config


def _input_name(model: nn.Module) -> str:
    name = getattr(model, "main_input_name", None)
    return name if isinstance(name, str) else "input_ids"


def example_inputs(
    model: nn.Module, batch: int = 2, seq: int = 8, seed: int = 0
) -> tuple[torch.Tensor]:
    """A random example for ``Output(model)``: token ids ``[batch, seq]``
    below the config's ``vocab_size``, or pixel values ``[batch,
    num_channels, image_size, image_size]`` for vision models."""
    if batch < 1 or seq < 1:
        raise ValueError(
            f"opbridge.integrations.hf.example_inputs: batch and seq must be >= 1, got {batch}, "
            f"{seq}"
        )
    config = _config(model)
    generator = torch.Generator().manual_seed(seed)
    if _input_name(model) == "pixel_values":
        size = getattr(config, "image_size", 224)
        size = size if isinstance(size, int) else size[0]
        channels = getattr(config, "num_channels", 3)
        return (torch.randn((batch, channels, size, size), generator=generator),)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        raise TypeError(
            f"opbridge.integrations.hf.example_inputs: {type(model).__name__}'s config has no "
            "vocab_size"
        )
    return (torch.randint(0, vocab, (batch, seq), generator=generator),)


def dynamic_shapes(
    example: tuple[torch.Tensor], *, sequence: bool = True, max_seq: int | None = None
):
    """``dynamic_shapes`` for ``opbridge.export.export(Output(model), example,
    ...)``: batch, and the sequence (dimension 1 of token ids) when
    ``sequence``; ``max_seq`` bounds it (default: none)."""
    (x,) = example
    dims: dict[int, Any] = {0: torch.export.Dim("batch", min=1)}
    if sequence and x.dim() == 2:
        dims[1] = (
            torch.export.Dim("seq", min=1, max=max_seq)
            if max_seq
            else torch.export.Dim("seq", min=1)
        )
    return (dims,)


# Families opbridge.patch adopts, with the output a model of that family is
# exported for: name -> (transformers model class, output).
FAMILIES = {
    "llama": ("LlamaForCausalLM", "logits"),
    "mistral": ("MistralForCausalLM", "logits"),
    "qwen2": ("Qwen2ForCausalLM", "logits"),
    "qwen3": ("Qwen3ForCausalLM", "logits"),
    "gemma": ("GemmaForCausalLM", "logits"),
    "gemma2": ("Gemma2ForCausalLM", "logits"),
    "phi3": ("Phi3ForCausalLM", "logits"),
    "t5": ("T5EncoderModel", "last_hidden_state"),
    "bert": ("BertModel", "last_hidden_state"),
    "gpt2": ("GPT2LMHeadModel", "logits"),
    "vit": ("ViTModel", "last_hidden_state"),
}


def random_model(
    family: str,
    *,
    hidden: int = 64,
    layers: int = 1,
    heads: int = 4,
    vocab: int = 96,
    image_size: int = 32,
    seed: int = 0,
) -> nn.Module:
    """A random-init transformers model of ``family`` (a key of
    :data:`FAMILIES`) built from a config, ``eval()``, with its norm weights
    perturbed away from their initial ones and zeros (so a norm computed the
    wrong way shows): for demos, tests and benchmarks; nothing downloaded.
    Imports transformers."""
    import transformers

    if family not in FAMILIES:
        raise ValueError(
            f"opbridge.integrations.hf.random_model: family must be one of {sorted(FAMILIES)}, "
            f"got {family!r}"
        )
    cls_name, _ = FAMILIES[family]
    head_dim = hidden // heads
    mlp = hidden * 3 // 2
    if family == "t5":
        config = transformers.T5Config(
            vocab_size=vocab,
            d_model=hidden,
            d_kv=head_dim,
            d_ff=mlp,
            num_layers=layers,
            num_heads=heads,
            # torch 2.13's exporter fails on T5's SDPA path (patched or not).
            attn_implementation="eager",
        )
    elif family == "bert":
        config = transformers.BertConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=mlp,
        )
    elif family == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab,
            n_embd=hidden,
            n_layer=layers,
            n_head=heads,
            bos_token_id=1,
            eos_token_id=2,
        )
    elif family == "vit":
        config = transformers.ViTConfig(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=mlp,
            image_size=image_size,
            patch_size=8,
        )
    else:
        config_name = cls_name.replace("ForCausalLM", "Config")
        config = getattr(transformers, config_name)(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=mlp,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            head_dim=head_dim,
            max_position_embeddings=max(64, 4 * hidden),
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            use_cache=False,
        )
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name.lower() or ".ln_" in name:
                param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model


def adoption(
    family: str,
    *,
    hidden: int = 256,
    layers: int = 2,
    heads: int = 4,
    vocab: int = 512,
    batch: int = 2,
    seq: int = 64,
    runs: int = 20,
    out_dir: Any = None,
    seed: int = 0,
) -> list[dict]:
    """One family adopted end to end at the given size (see
    :func:`opbridge.integrations.adoption.compare_exports`; dynamic batch and sequence):
    the unpatched model exported by the standard route, the patched one by
    the custom and the standard route, each timed in ONNX Runtime and
    compared with the unpatched torch model."""
    from opbridge.integrations.adoption import compare_exports

    original = random_model(
        family,
        hidden=hidden,
        layers=layers,
        heads=heads,
        vocab=vocab,
        seed=seed,
        image_size=max(32, 8 * int(seq**0.5)),
    )
    output = FAMILIES[family][1]
    example = example_inputs(original, batch=batch, seq=seq, seed=seed)
    return compare_exports(
        original,
        example,
        name=f"hf_{family}",
        wrap=lambda model: Output(model, output),
        dynamic_shapes=dynamic_shapes(example),
        runs=runs,
        out_dir=out_dir,
    )


def demo_lines(out_dir: Any, seed: int = 0, runs: int = 20) -> tuple[list[str], bool]:
    """The demo's Hugging Face part: a random-init LlamaForCausalLM (hidden
    256, 2 layers) patched in one call, exported by both routes with dynamic
    batch and sequence, verified against the unpatched model, and timed
    against the unpatched model's standard export. Report lines and whether
    everything agreed."""
    import copy

    from opbridge.patching import patch
    from opbridge.verify import verify

    rows = adoption("llama", runs=runs, out_dir=out_dir, seed=seed)
    base = rows[0]
    lines = [
        "",
        "Hugging Face LlamaForCausalLM (random init: hidden 256, 2 layers, 4 heads, vocab 512; "
        "input [2x64] token ids), `opbridge.patch(model)`: "
        f"{rows[1]['replaced']} modules replaced",
        "",
        "| model | route | nodes (opbridge) | max abs err vs unpatched torch | median ms "
        "| vs unpatched standard |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        model, route = row["path"].split(", ")
        route = route.removesuffix(" route")
        lines.append(
            f"| {model} | {route} | {row['nodes']} ({row['opbridge_nodes']}) "
            f"| {row['max_abs_err']:.2e} | {row['ms']:.3f} | {base['ms'] / row['ms']:.2f}x |"
        )
    original = random_model("llama", hidden=256, layers=2, vocab=512, seed=seed)
    reference = Output(copy.deepcopy(original), "logits")
    patch(original)
    example = example_inputs(original, batch=2, seq=16, seed=seed)
    passed = all(row["max_abs_err"] <= 1e-4 for row in rows)
    lines += ["", "| verify against the unpatched model | result | divergence |", "|---|---|---|"]
    for route in ("custom", "standard"):
        report = verify(
            Output(original, "logits"),
            example,
            route=route,
            reference=reference,
            dynamic_sequence=True,
            draws=2,
            seed=seed,
        )
        passed = passed and report.passed
        lines.append(
            f"| LlamaForCausalLM, {route} route | {'PASS' if report.passed else 'FAIL'} | "
            f"{report.diverges_in or '-'} |"
        )
    return lines, passed
