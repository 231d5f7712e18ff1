"""Dynamic dimensions for export: the batch and sequence dimensions of a
model's inputs, for either exporter."""

from __future__ import annotations

from typing import Any

import torch


def batch_dynamic_shapes(args: tuple, model: Any = None) -> tuple | None:
    """``dynamic_shapes`` that make dimension 0 of every tensor of ``args``
    whose first dimension equals the first tensor's one shared ``batch``
    dimension; None when the first tensor is a scalar. With ``model``, the
    entries of a ``*args`` parameter of its ``forward`` are grouped as
    ``torch.export`` expects."""
    from torch.utils import _pytree as pytree

    leaves = [leaf for leaf in pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
    if not leaves or leaves[0].dim() == 0:
        return None
    return dynamic_spec(args, model, batch=True, sequence=False)


def dynamic_spec(args: tuple, model: Any = None, *, batch: bool, sequence: bool) -> Any:
    """``dynamic_shapes`` for ``args``: with ``batch``, dimension 0 of every
    tensor whose first dimension equals the first tensor's (one ``batch``
    dimension, as ``export(dynamic_batch=True)`` makes it); with
    ``sequence``, dimension 1 of every tensor of two or more dimensions
    (tensors of the same length share one: ``sequence``, then
    ``sequence_2``, ...). With ``model``, the entries of a ``*args``
    parameter of its ``forward`` are grouped as ``torch.export`` expects."""
    import inspect

    from torch.utils import _pytree as pytree

    tensors = [leaf for leaf in pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
    first = tensors[0].shape[0] if tensors and tensors[0].dim() > 0 else None
    batch_dim = torch.export.Dim("batch", min=1)
    lengths: dict[int, Any] = {}

    def spec(leaf):
        if not isinstance(leaf, torch.Tensor):
            return None
        dims = {}
        if batch and first is not None and leaf.dim() > 0 and leaf.shape[0] == first:
            dims[0] = batch_dim
        if sequence and leaf.dim() >= 2:
            length = int(leaf.shape[1])
            if length not in lengths:
                name = "sequence" if not lengths else f"sequence_{len(lengths) + 1}"
                lengths[length] = torch.export.Dim(name, min=1)
            dims[1] = lengths[length]
        return dims or None

    specs = tuple(pytree.tree_map(spec, tuple(args)))
    forward = getattr(model, "forward", None)
    if forward is not None:
        params = list(inspect.signature(forward).parameters.values())
        for i, param in enumerate(params):
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                return (*specs[:i], specs[i:])
    return specs


def legacy_dynamic_axes(args: tuple, dynamic_shapes: Any, kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    names = list(kwargs.get("input_names") or [f"input_{i}" for i in range(len(args))])
    kwargs["input_names"] = names
    shapes = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else dynamic_shapes
    axes = dict(kwargs.get("dynamic_axes") or {})
    for name, dims in zip(names, shapes, strict=False):
        if not dims:
            continue
        axes[name] = {int(d): getattr(dim, "__name__", f"{name}_dim{d}") for d, dim in dims.items()}
    kwargs["dynamic_axes"] = axes
    return kwargs
