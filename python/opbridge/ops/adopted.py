"""Operators opbridge did not build: a ``torch.library.custom_op``, a
``triton_op``, a ``TORCH_LIBRARY`` operator of a ``cpp_extension``. Registering
a card for one (:func:`opbridge.ops.register_card`, its ``standard`` form and
``reference``) adopts it: its spec (inputs, attributes, outputs) is read from
the schema PyTorch registered for it, and export, verify and PyTorch's own
exporters take it by the routes that need no runtime library of its own
(``standard``, and ``ort``, which falls back to the standard form)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from opbridge._library import library_for_namespace
from opbridge.ops._card import cards

# A schema's scalar types, as a spec's attribute types name them.
_ATTRIBUTE_TYPES = {
    "float": "float",
    "int": "int",
    "SymInt": "int",
    "bool": "bool",
    "str": "str",
    "List[float]": "float[]",
}


class UnsupportedSchemaError(TypeError):
    """An adopted operator's schema has an argument or a return opbridge
    cannot map to an ONNX input, attribute or output."""


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def schema_spec(namespace: str, name: str) -> dict:
    """The spec of ``torch.ops.<namespace>.<name>.default``, from its
    registered schema: each ``Tensor`` (``Tensor?``) argument an input, each
    scalar argument an attribute of the same name (with its default), each
    returned ``Tensor`` an output. An ``UnsupportedSchemaError`` names
    anything else."""
    op = getattr(getattr(torch.ops, namespace), name).default
    schema = op._schema
    qualified = f"{namespace}::{name}"
    inputs, attrs = [], []
    for argument in schema.arguments:
        kind = str(argument.type)
        if kind in ("Tensor", "Optional[Tensor]", "Tensor?"):
            inputs.append({"name": argument.name, "optional": kind != "Tensor"})
        elif kind in _ATTRIBUTE_TYPES:
            default = argument.default_value if argument.has_default_value() else None
            attrs.append(
                {"name": argument.name, "type": _ATTRIBUTE_TYPES[kind], "default": default}
            )
        else:
            raise UnsupportedSchemaError(
                f"opbridge: {qualified}: argument {argument.name!r} is a {kind}; an adopted "
                f"operator takes Tensor, Tensor? and scalar ({', '.join(_ATTRIBUTE_TYPES)}) "
                f"arguments (its schema: {schema})"
            )
    outputs = []
    for index, returned in enumerate(schema.returns):
        if str(returned.type) != "Tensor":
            raise UnsupportedSchemaError(
                f"opbridge: {qualified}: return {index} is a {returned.type}; an adopted "
                f"operator returns Tensors (its schema: {schema})"
            )
        outputs.append(returned.name or f"output_{index}")
    return {
        "name": name,
        "onnx_type": _camel(name),
        "doc": f"{qualified}, adopted from its PyTorch schema: {schema}",
        "inputs": inputs,
        "attrs": attrs,
        "outputs": outputs,
        "values": {},
        "torch_schema": str(schema),
        "torch_namespace": namespace,
        "onnx_domain": namespace,
    }


@dataclass(frozen=True)
class AdoptedOps:
    """The adopted operators of one torch namespace, read as export reads an
    operator library (``specs()``, ``op(name)``, the domain it would have):
    no runtime library of its own stands behind them."""

    torch_namespace: str
    adopted: bool = True
    domain_version: int = 1
    version: str = ""

    @property
    def name(self) -> str:
        return self.torch_namespace

    @property
    def onnx_domain(self) -> str:
        return self.torch_namespace

    def specs(self) -> dict[str, dict]:
        return {
            card.name: schema_spec(self.torch_namespace, card.name)
            for card in cards().values()
            if card.namespace == self.torch_namespace and _is_op(card.namespace, card.name)
        }

    def op(self, name: str) -> Any:
        return getattr(getattr(torch.ops, self.torch_namespace), name).default


def _is_op(namespace: str, name: str) -> bool:
    try:
        return hasattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False


def is_adopted(library: Any) -> bool:
    """Whether ``library`` is :class:`AdoptedOps` (no runtime library)."""
    return getattr(library, "adopted", False)


def adopted() -> list[AdoptedOps]:
    """The namespaces of every registered card whose operator PyTorch has and
    no loaded opbridge library holds."""
    namespaces = sorted(
        {
            card.namespace
            for card in cards().values()
            if library_for_namespace(card.namespace) is None and _is_op(card.namespace, card.name)
        }
    )
    return [AdoptedOps(namespace) for namespace in namespaces]


def exportable_for_domain(domain: str) -> Any:
    """The loaded library whose ONNX domain is ``domain``, else the adopted
    operators of the namespace of that name (an adopted operator's domain
    is its namespace), else None."""
    from opbridge._library import library_for_domain

    library = library_for_domain(domain)
    if library is not None:
        return library
    return next((found for found in adopted() if found.onnx_domain == domain), None)
