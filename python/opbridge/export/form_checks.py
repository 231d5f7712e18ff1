"""The standard form of a library operator, checked against its spec at export.

A standard form (a card's ``standard=``) is a second definition of an
op, and nothing downstream checks it: the dynamo exporter gives the form's
outputs the shapes PyTorch traced whatever the form computes, and ONNX
Runtime, finding a shape it does not agree with, only warns ("Falling back
to lenient merge") and runs. So wherever export emits an op's standard form
(the ``standard`` route, the ``ort`` route where it takes the standard form,
and every body of the ``function`` route), :func:`check_form` checks it for
that node first:

* the number of outputs, against the spec's;
* each output's dtype and shape as ONNX shape inference (strict mode, with
  data propagation) gives them for the form built for the node's inputs,
  against the spec's shape rule on the same inputs: once with the sizes the
  export sees (a dynamic dimension symbolic), and once with distinct sizes
  where the example's coincide (a square input) or are dynamic, so that a
  form that reduces or reshapes over the wrong axis gives a shape other than
  the rule's; the distinct sizes are ones the shape rule accepts, found a
  dimension at a time;
* the node's attribute values, through the spec's own checks (its shape rule
  with the attributes, the rule PyTorch's fake kernel and the kernels run).

Each disagreement is an :class:`~opbridge.export.ExportError` naming the op,
the output or attribute, what the spec expects and what the form gives. A
node checked once (same op, form, opset, inputs and attributes) is not
checked again in the process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opbridge import _dtypes
from opbridge._library import Library
from opbridge.export.errors import ExportError
from opbridge.export.nodes import attr_value
from opbridge.ops.adopted import is_adopted

# How many checked nodes are remembered (a model repeats the same op on the
# same shapes in every layer).
_CACHE_SIZE = 4096
_CHECKED: set = set()


@dataclass(frozen=True)
class Seen:
    """One input of a node as the exporter sees it: its dtype as the specs
    name dtypes (None: unknown), and its dimensions (None: unknown rank):
    each an int, a str (a named dynamic dimension) or None (a dynamic one
    without a name)."""

    dtype: str | None
    shape: tuple | None

    def describe(self, name: str) -> str:
        if self.shape is None:
            return f"{name} {self.dtype or 'of any dtype'} of any shape"
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{name} {self.dtype or 'of any dtype'} [{dims}]"


def seen_dynamo(value: Any) -> Seen | None:
    """An input of the dynamo exporter's translation (an onnxscript value)."""
    if value is None:
        return None
    dtype = None
    if getattr(value, "dtype", None) is not None:
        try:
            dtype = _dtypes.FROM_ONNX.get(int(value.dtype))
        except (TypeError, ValueError):
            dtype = None
    shape = getattr(value, "shape", None)
    if shape is None:
        return Seen(dtype, None)
    dims = []
    for d in shape:
        if isinstance(d, int):
            dims.append(d)
        else:
            name = getattr(d, "value", None)
            dims.append(name if isinstance(name, str) else None)
    return Seen(dtype, tuple(dims))


def seen_legacy(value: Any) -> Seen | None:
    """An input of the TorchScript exporter's symbolic (a ``torch.Value``)."""
    if value is None:
        return None
    try:
        value_type = value.type()
        dtype = _dtypes.FROM_TORCHSCRIPT.get(value_type.scalarType() or "")
        sizes = value_type.varyingSizes()
    except Exception:
        return Seen(None, None)
    return Seen(dtype, None if sizes is None else tuple(sizes))


def seen_proto(value: Any) -> Seen | None:
    """An input of a function body (an :class:`opbridge.export.builder.ProtoValue`)."""
    if value is None:
        return None
    return Seen(value.dtype, None if value.shape is None else tuple(value.shape))


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else value


def check_form(
    library: Library,
    spec: dict,
    form: Callable,
    inputs: list,
    attrs: dict,
    result: Any,
    *,
    opset: int,
    avoid: frozenset[str] = frozenset(),
    what: str = "standard form",
) -> None:
    """Checks ``form``, the op's standard form as export built it for one
    node, against the op's spec (see the module's documentation); an
    :class:`~opbridge.export.ExportError` where they disagree.

    ``inputs``: the node's inputs as :class:`Seen` (None for an absent one),
    in spec order; ``attrs``: its attribute values by name; ``result``: what
    the form returned for it; ``opset`` and ``avoid``: what it was built at.
    """
    qualified = f"{library.torch_namespace}::{spec['name']}"
    outputs = list(spec["outputs"])
    results = result if isinstance(result, tuple | list) else (result,)
    if len(results) != len(outputs):
        raise _error(
            f"{qualified}: its {what} gives {len(results)} "
            f"output{'s' if len(results) != 1 else ''}, its spec has {len(outputs)} "
            f"({', '.join(outputs)})"
        )
    if is_adopted(library):
        return  # no shape rule to hold the form to (opbridge did not build the op)
    inputs = list(inputs) + [None] * (len(spec["inputs"]) - len(inputs))
    if any(s is not None and (s.dtype is None or s.shape is None) for s in inputs):
        return  # not known at export: the runtime's shape inference has it
    try:
        key = (
            qualified,
            form,
            opset,
            frozenset(avoid),
            what,
            tuple(inputs),
            tuple((name, _hashable(value)) for name, value in sorted(attrs.items())),
        )
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _CHECKED:
        return
    _Check(library, spec, form, inputs, attrs, opset, avoid, what).run()
    if key is not None:
        if len(_CHECKED) >= _CACHE_SIZE:
            _CHECKED.clear()
        _CHECKED.add(key)


def _error(message: str):

    return ExportError(f"opbridge.export.export: {message}")


# A probe: per present input, its dims (int: a size; None: dynamic, unknown
# to the form); ``sizes`` the same with every dim given a size, or None where
# the probe keeps dynamic dims symbolic.
@dataclass
class _Probe:
    static: list  # per input: None (absent) or list of int | None
    sizes: list | None  # per input: None or list of int, or None for symbolic


class _Check:
    def __init__(self, library, spec, form, inputs, attrs, opset, avoid, what):
        self.library, self.spec, self.form = library, spec, form
        self.inputs, self.attrs = inputs, attrs
        self.opset, self.avoid, self.what = opset, frozenset(avoid), what
        self.qualified = f"{library.torch_namespace}::{spec['name']}"
        self.formals = [p["name"] for p in spec["inputs"]]
        self.attr_values = [
            attr_value(a, attrs[a["name"]]) if attrs.get(a["name"]) is not None else None
            for a in spec["attrs"]
        ]

    # The spec's shape rule.
    def _rule(self, sizes: list, attr_values: list | None = None):
        infos = [
            (False, "", [])
            if dims is None
            else (True, seen.dtype, [-1 if d is None else d for d in dims])
            for seen, dims in zip(self.inputs, sizes, strict=True)
        ]
        values = self.attr_values if attr_values is None else attr_values
        if any(v is None for v in values):
            return self.library.module.infer(self.spec["name"], infos)
        return self.library.module.infer(self.spec["name"], infos, list(values))

    def _accepts(self, sizes: list, attr_values: list | None = None) -> bool:
        try:
            self._rule(sizes, attr_values)
        except ValueError:
            return False
        return True

    def run(self) -> None:
        exported = [
            None if s is None else [d if isinstance(d, int) else None for d in s.shape]
            for s in self.inputs
        ]
        try:
            expected = self._rule(exported)
        except ValueError as error:
            self._refused(exported, str(error))
            return
        self._compare(_Probe(exported, None), expected)
        distinct = self._distinct_sizes()
        if distinct is not None:
            static = [
                None
                if dims is None
                else [
                    size if known is not None else None
                    for known, size in zip(base, dims, strict=True)
                ]
                for base, dims in zip(exported, distinct, strict=True)
            ]
            self._compare(_Probe(static, distinct), self._rule(distinct))

    # Attributes the spec refuses.
    def _refused(self, sizes: list, message: str) -> None:
        names = [a["name"] for a in self.spec["attrs"]]
        culprit = None
        for found in re.findall(r"argument '([^']+)'", message):
            if found in names:
                culprit = found
                break
        if culprit is None:
            for index, attr in enumerate(self.spec["attrs"]):
                if attr["default"] is None:
                    continue
                default = attr_value(attr, attr["default"])
                if self.attr_values[index] == default:
                    continue
                trial = list(self.attr_values)
                trial[index] = default
                if self._accepts(sizes, trial):
                    culprit = attr["name"]
                    break
        if culprit is not None:
            value = self.attrs.get(culprit)
            raise _error(
                f"{self.qualified}: attribute {culprit!r} = {value!r} is a value its spec refuses "
                f"(exporting its {self.what}): {message}"
            )
        if all(d is not None for dims in sizes if dims is not None for d in dims):
            raise _error(
                f"{self.qualified}: its spec refuses the node (exporting its {self.what}): "
                f"{message}"
            )
        # Refused only with dynamic dimensions the rule could not see: the
        # runtime's checks have it.

    # Distinct sizes: every dynamic dimension and every size the example
    # repeats made a size of its own, where the shape rule accepts it.
    def _distinct_sizes(self) -> list | None:
        known = [d for s in self.inputs if s is not None for d in s.shape if isinstance(d, int)]
        fresh = iter(range(max([*known, 1]) + 1, 1 << 30))
        named: dict[str, int] = {}
        unnamed = None
        sizes = []
        dynamic = False
        for s in self.inputs:
            if s is None:
                sizes.append(None)
                continue
            dims = []
            for d in s.shape:
                if isinstance(d, int):
                    dims.append(d)
                    continue
                dynamic = True
                if d is None:
                    unnamed = next(fresh) if unnamed is None else unnamed
                    dims.append(unnamed)
                else:
                    dims.append(named.setdefault(d, next(fresh)))
            sizes.append(dims)
        if not self._accepts(sizes):
            return None
        # A named dynamic dimension is one size wherever it appears (torch
        # proved them equal); a static size above 1 and an unnamed dynamic
        # one may be equal by chance.
        counts: dict[int, int] = {}
        for dims in sizes:
            for d in dims or ():
                counts[d] = counts.get(d, 0) + 1
        split = False
        for i, s in enumerate(self.inputs):
            if s is None:
                continue
            for j, d in enumerate(s.shape):
                size = sizes[i][j]
                if isinstance(d, str) or counts[size] < 2 or size <= 1:
                    continue
                trial = [None if dims is None else list(dims) for dims in sizes]
                trial[i][j] = next(fresh)
                if self._accepts(trial):
                    sizes = trial
                    counts[size] -= 1
                    split = True
        return sizes if (split or dynamic) else None

    def _describe(self, dims_of: list) -> str:
        parts = []
        for formal, seen, dims in zip(self.formals, self.inputs, dims_of, strict=True):
            if seen is None:
                continue
            parts.append(Seen(seen.dtype, tuple(dims)).describe(formal))
        parts += [f"{name}={value!r}" for name, value in self.attrs.items()]
        return ", ".join(parts)

    def _compare(self, probe: _Probe, expected: list) -> None:
        import onnx
        from onnx import helper

        from opbridge.export.builder import ProtoBuilder, ProtoValue

        builder = ProtoBuilder(self.opset, self.avoid)
        values = [
            None if dims is None else ProtoValue(formal, seen.dtype, dims)
            for formal, seen, dims in zip(self.formals, self.inputs, probe.static, strict=True)
        ]
        try:
            result = self.form(builder, *values, **self.attrs)
        except (ValueError, NotImplementedError):
            # No form for these sizes (or none of ai.onnx operators alone):
            # nothing to check them by.
            return
        results = result if isinstance(result, tuple | list) else (result,)
        if len(results) != len(expected):
            return  # the export's own count was checked
        exact = probe.sizes is not None
        if exact:
            shown = probe.sizes
            where = (
                f"at distinct sizes ({self._describe(probe.sizes)}) in place of the export's "
                f"({self._describe([s.shape if s is not None else None for s in self.inputs])})"
            )
        else:
            shown = [s.shape if s is not None else None for s in self.inputs]
            where = f"for {self._describe(shown)}"
        graph_inputs = []
        for formal, seen, dims in zip(self.formals, self.inputs, shown, strict=True):
            if seen is None:
                continue
            graph_dims = [
                d if isinstance(d, int) else (d or f"{formal}_dim{axis}")
                for axis, d in enumerate(dims)
            ]
            graph_inputs.append(
                helper.make_tensor_value_info(formal, _dtypes.ONNX[seen.dtype], graph_dims)
            )
        names = [f"opbridge_check_{k}" for k in range(len(results))]
        nodes = list(builder.nodes)
        nodes += [
            helper.make_node("Identity", [value.name], [name])
            for value, name in zip(results, names, strict=True)
        ]
        graph = helper.make_graph(nodes, "standard_form_check", graph_inputs, [])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            inferred = onnx.shape_inference.infer_shapes(
                model, check_type=True, strict_mode=True, data_prop=True
            )
        except onnx.shape_inference.InferenceError as error:
            # The first error is the cause; the nodes after it only lack types.
            lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
            first = lines[0].split("Inference error(s):", 1)[-1].strip() if lines else ""
            raise _error(
                f"{self.qualified}: its {self.what}, {where}: ONNX shape inference refuses "
                f"it: {first or type(error).__name__}"
            ) from error
        types = {v.name: v.type for v in inferred.graph.value_info}
        for index, (name, (dtype, shape)) in enumerate(zip(names, expected, strict=True)):
            self._compare_output(self.spec["outputs"][index], types.get(name), dtype, shape, where)

    def _compare_output(self, output, got, dtype, shape, where) -> None:
        # A dynamic dimension is compared where both sides know its size.
        if got is None or not got.HasField("tensor_type"):
            return
        tensor = got.tensor_type
        prefix = f"{self.qualified}: its {self.what}, {where}: output {output!r}"
        if tensor.elem_type:
            gives = _dtypes.FROM_ONNX.get(tensor.elem_type) or str(tensor.elem_type)
            if gives != dtype:
                raise _error(f"{prefix} is {gives}, its spec's shape rule gives {dtype}")
        if not tensor.HasField("shape"):
            return
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
        wanted = "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"
        gives = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        if len(dims) != len(shape):
            raise _error(
                f"{prefix} has rank {len(dims)} ({gives}), its spec's shape rule gives rank "
                f"{len(shape)} ({wanted})"
            )
        for axis, (want, have) in enumerate(zip(shape, dims, strict=True)):
            if want >= 0 and isinstance(have, int) and have != want:
                raise _error(
                    f"{prefix} has shape {gives}, its spec's shape rule gives {wanted} "
                    f"(dimension {axis}: {have}, not {want})"
                )
