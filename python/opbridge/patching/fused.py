"""Fused forwards for layers whose fusion spans more than one module.

``opbridge.patch`` replaces modules (norms, GELU); some fusions live in a
layer's ``forward`` instead: the residual add before a norm, and Hugging Face
attention's module-level ``apply_rotary_pos_emb``. For those, ``patch``
changes the class of that one module object to a subclass of its own class
whose ``forward`` uses opbridge's kernels (``isinstance`` still holds, the
parameters and ``state_dict`` keys are untouched) and ``unpatch`` puts the
class back. Other instances of the class, and other models, are not
affected: the function-level rotary patch is a copy of the attention's
``forward`` that sees opbridge's ``apply_rotary_pos_emb`` in its own
globals, not a change to the transformers module.

Each fusion is checked like a module replacement: the layer runs on a probe
(hidden states of its own width and dtype; for attention and decoder layers
also rotary tables in Hugging Face's layout) with its own forward and with
the fused one, and a difference beyond the dtype's tolerance refuses it.

Kinds (each found by the module's structure and class name, transformers
5.x layouts):

- ``decoder``: residual add + RMS norm between attention and MLP in
  Llama-style decoder layers (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3),
  as ``add_rms_norm``; Gemma 2/3 layers fuse the add before their
  pre-feed-forward norm.
- ``post_norm``: BERT-style ``LayerNorm(dropout(dense(h)) + input)``
  (``BertSelfOutput``, ``BertOutput`` and their copies), as
  ``add_layer_norm``.
- ``vit_layer``: ViT/DeiT layers' residual add before ``layernorm_after``.
- ``rotary``: attention whose forward calls ``apply_rotary_pos_emb`` (q, k
  as ``[batch, heads, seq, head_dim]``, cos/sin ``[batch, seq, head_dim]``
  with equal halves): opbridge's ``rotary_embedding`` on q and k, seen as
  ``[batch, seq, heads, head_dim]`` (a transposed view, no copy of the
  tables); other layouts and partial rotary fall back to the original
  function at call time.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from opbridge.patching.families import bert, gemma2, llama, phi3, rotary, timm, vit
from opbridge.patching.forwards import Family

# Tried in this order; the first family whose ``matches`` holds takes the layer.
FAMILIES: tuple[Family, ...] = (
    gemma2.FAMILY,
    llama.FAMILY,
    phi3.FAMILY,
    bert.FAMILY,
    vit.FAMILY,
    timm.FAMILY,
    rotary.FAMILY,
)
_CACHE: dict[tuple[type, str], type] = {}


def family_of(module: nn.Module) -> Family | None:
    return next((family for family in FAMILIES if family.matches(module)), None)


def rule_of(module: nn.Module) -> str:
    family = family_of(module)
    return family.rule if family is not None else "fused forward"


def find(module: nn.Module) -> tuple[str, type, Callable] | None:
    """``(rule name, fused class, probe)`` for a module with a fused forward,
    None for any other; raises ``Leave`` for one recognized but not fusable
    (e.g. its norm was not replaced)."""
    if getattr(type(module), "_opbridge_fused", None):
        return None
    family = family_of(module)
    if family is None:
        return None
    family.ready(module)
    return family.rule, _fused_class(type(module), family), family.probe


def _fused_class(cls: type, family: Family) -> type:
    key = (cls, family.name)
    if key not in _CACHE:
        namespace = {
            "forward": family.forward(cls),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_opbridge_fused": family.kind,
        }
        _CACHE[key] = type(cls.__name__, (cls,), namespace)
    return _CACHE[key]
