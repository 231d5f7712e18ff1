"""Hugging Face models through opbridge: what exporting one needs besides
``opbridge.patch``.

``opbridge.patch(model)`` adopts a transformers model by itself (norms, q/k
norms, residual add + norm, rotary embedding, bias + GELU; see
:func:`opbridge.patch`). What this module adds is the export side: a model
that takes one tensor and returns one (:class:`Output`), example inputs from
the model's config (:func:`example_inputs`) and ``dynamic_shapes`` for batch
and sequence (:func:`dynamic_shapes`). transformers is not imported here:
everything reads the model's ``config`` attributes.

Recipe (see the README): build or load the model with ``use_cache=False``
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
                f"opbridge.hf.Output: {type(self.model).__name__} returned no tensor named "
                f"{self.output!r} (got {type(result).__name__})"
            )
        return value

    def extra_repr(self) -> str:
        return f"output={self.output!r}, input_name={self.input_name!r}"


def _config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(
            f"opbridge.hf: {type(model).__name__} has no config attribute; expected a "
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
            f"opbridge.hf.example_inputs: batch and seq must be >= 1, got {batch}, {seq}"
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
            f"opbridge.hf.example_inputs: {type(model).__name__}'s config has no vocab_size"
        )
    return (torch.randint(0, vocab, (batch, seq), generator=generator),)


def dynamic_shapes(
    example: tuple[torch.Tensor], *, sequence: bool = True, max_seq: int | None = None
):
    """``dynamic_shapes`` for ``opbridge.onnx.export(Output(model), example,
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
