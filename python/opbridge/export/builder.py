"""One way to write a standard-route decomposition for both exporters.

A decomposition is a function ``(b, *inputs, **attrs)`` that calls
``b.op(op_type, *inputs, **attrs)``; :class:`DynamoBuilder` emits through
onnxscript (the dynamo exporter's custom translation table) and
:class:`LegacyBuilder` through the TorchScript graph context
(``torch.onnx.register_custom_op_symbolic``). ``b.opset`` is the target ONNX
opset, so a decomposition can choose the form that opset has.

An ``ort``-route form also emits ONNX Runtime's own operators with
``b.contrib(op_type, *inputs, outputs=n, **attrs)`` (their domains and
signatures: :data:`opbridge.export.contrib.SCHEMAS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from opbridge import _dtypes

_INT64_MAX = 2**63 - 1


class FormError(ValueError):
    """A node a builder cannot emit as the form wrote it, with what to write
    instead; the export's error names the operator and its form."""


class Builder:
    opset: int
    # ONNX operators not to emit where a form has another way ("RotaryEmbedding",
    # "com.microsoft::RotaryEmbedding"): a runtime the model is for computes them wrong.
    avoid: frozenset[str] = frozenset()

    def allows(self, op_type: str, domain: str = "") -> bool:
        """Whether a form may emit ``op_type`` of ``domain`` (ai.onnx by default)."""
        return (f"{domain}::{op_type}" if domain else op_type) not in self.avoid

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        """One node of ai.onnx's ``op_type`` on ``inputs``, with attributes
        by ONNX's names and Python values (int, float, str, or a list of one
        of them); its first output."""
        raise NotImplementedError

    def contrib(self, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """One node of an ONNX Runtime operator of :data:`opbridge.export.contrib.SCHEMAS`.

        Returns its first output, or a tuple of the first ``outputs``; the
        node gets every output of the schema, and the export drops those no
        node reads (:func:`opbridge.export.contrib.drop_unused_outputs`)."""
        raise NotImplementedError

    def skip_normalization(self, op_type: str, x, skip, *params, epsilon: float):
        """ONNX Runtime's Skip(Simplified)LayerNormalization on ``x + skip``:
        ``(out, sum)``. The operator takes 2-D or 3-D inputs only, so other
        ranks (or an unknown one) are reshaped to ``[-1, hidden]`` and back."""
        shape = self.shape(x)
        flat = shape is None or len(shape) not in (2, 3)
        if flat:
            full = self.op("Shape", x)
            hidden = self.op("Slice", full, self.ints([-1]), self.ints([_INT64_MAX]))
            rows = self.op("Concat", self.ints([-1]), hidden, axis=0)
            x, skip = self.op("Reshape", x, rows), self.op("Reshape", skip, rows)
        out, _, _, total = self.contrib(op_type, x, skip, *params, outputs=4, epsilon=epsilon)
        if flat:
            out, total = self.op("Reshape", out, full), self.op("Reshape", total, full)
        return out, total

    def shape(self, value: Any) -> list[int | None] | None:
        """``value``'s dimensions as known at export time (None for a
        dynamic one), or None when not even its rank is known."""
        raise NotImplementedError

    def constant(self, value: float, like: Any) -> Any:
        """A scalar of ``like``'s dtype."""
        raise NotImplementedError

    def ints(self, values: list[int]) -> Any:
        """A 1-D int64 tensor (axes, shapes)."""
        raise NotImplementedError

    def int_scalar(self, value: int) -> Any:
        """A 0-D int64 tensor (Range's bounds)."""
        raise NotImplementedError

    def float_dtype(self, value: Any) -> str | None:
        """ "float32" / "float64" / ... when known at export time, else None."""
        raise NotImplementedError

    def floats(self, values: list[float], like: Any) -> Any:
        """A 1-D tensor of ``like``'s (floating) dtype; float32 when unknown."""
        raise NotImplementedError

    def dtype(self, value: Any) -> str | None:
        """Any element type ("uint8", "float32", ...) when known, else None."""
        raise NotImplementedError


class DynamoBuilder(Builder):
    def __init__(self, opset: int, avoid: frozenset[str] = frozenset()):
        import onnxscript

        self.opset, self.avoid = opset, frozenset(avoid)
        self._ops = onnxscript.values.Opset("", opset)

    def op(self, op_type, *inputs, **attrs):
        return getattr(self._ops, op_type)(*inputs, **attrs)

    def contrib(self, op_type, *inputs, outputs=1, **attrs):
        import onnxscript

        from opbridge.export.contrib import onnx_schema

        schema = onnx_schema(op_type)
        opset = onnxscript.values.Opset(schema.domain, schema.since_version)
        results = onnxscript.values.Op(opset, op_type, op_schema=schema)(*inputs, **attrs)
        results = tuple(results) if isinstance(results, list | tuple) else (results,)
        return results[0] if outputs == 1 else results[:outputs]

    def shape(self, value):
        shape = getattr(value, "shape", None)
        if shape is None:
            return None
        return [d if isinstance(d, int) else None for d in shape]

    def constant(self, value, like):
        import onnx_ir as ir

        dtype = self.float_dtype(like)
        if dtype is not None:
            return self.op("Constant", value=ir.tensor(np.array(value, dtype=dtype)))
        return self.op("CastLike", self.op("Constant", value_float=float(value)), like)

    def ints(self, values):
        import onnx_ir as ir

        return self.op("Constant", value=ir.tensor(np.array(values, dtype=np.int64)))

    def int_scalar(self, value):
        import onnx_ir as ir

        return self.op("Constant", value=ir.tensor(np.array(value, dtype=np.int64)))

    def float_dtype(self, value):
        dtype = getattr(value, "dtype", None)
        if dtype is None:
            return None
        try:
            return np.dtype(dtype.numpy()).name
        except Exception:
            return None

    def floats(self, values, like):
        import onnx_ir as ir

        dtype = self.float_dtype(like) or "float32"
        return self.op("Constant", value=ir.tensor(np.array(values, dtype=dtype)))

    def dtype(self, value):
        return self.float_dtype(value)


_LEGACY_SUFFIX = {float: "f", int: "i", str: "s"}
# A shape the TorchScript exporter's shape inference computes (from
# constants) with a 0 and no -1 fails its internal assert "minus_one_pos !=
# -1"; a constant shape the builder rewrites (LegacyBuilder._reshape_target).
_RESHAPE_ASSERT = (
    "Reshape with a shape computed from constants that keeps a dimension (a 0) and has no -1 "
    "fails the legacy (TorchScript) exporter's shape inference; write the shape as one "
    "constant, b.ints([...]) (the builder then reads each 0 from the input's Shape), or give "
    "one dimension as -1, or export with dynamo=True"
)


class LegacyBuilder(Builder):
    def __init__(self, g: Any, opset: int, avoid: frozenset[str] = frozenset()):
        self.g = g
        self.opset, self.avoid = opset, frozenset(avoid)

    def op(self, op_type, *inputs, **attrs):
        reshape = op_type == "Reshape" and len(inputs) == 2 and not attrs.get("allowzero")
        if reshape:
            inputs = (inputs[0], self._reshape_target(*inputs))
        named = {}
        for name, value in attrs.items():
            sample = value[0] if isinstance(value, list | tuple) else value
            named[f"{name}_{_LEGACY_SUFFIX[type(sample)]}"] = value
        try:
            return self.g.op(op_type, *inputs, **named)
        except RuntimeError as error:
            if reshape and "minus_one_pos" in str(error):
                raise FormError(_RESHAPE_ASSERT) from error
            raise

    def _reshape_target(self, data, shape):
        """Reshape's ``shape``, where it is a constant with a 0 (keep that
        dimension) and no -1, as the Concat of ``data``'s size read with
        Shape at each 0 and the constant's size elsewhere: the TorchScript
        exporter's shape inference fails an internal assert on the constant
        ("minus_one_pos != -1 INTERNAL ASSERT FAILED"), and follows this one
        into the output's dimensions (a dynamic one by its name) where each
        part is one dimension."""
        import torch

        node = shape.node() if isinstance(shape, torch._C.Value) else None
        if isinstance(shape, torch.Tensor):
            target = shape.tolist()
        elif node is not None and node.kind() == "onnx::Constant" and node.hasAttribute("value"):
            target = node.t("value").tolist()
        else:
            return shape
        if not isinstance(target, list) or 0 not in target or -1 in target:
            return shape
        sizes = self.op("Shape", data)
        parts = [
            self.op("Gather", sizes, self.ints([i]), axis=0) if size == 0 else self.ints([size])
            for i, size in enumerate(target)
        ]
        return self.op("Concat", *parts, axis=0)

    def contrib(self, op_type, *inputs, outputs=1, **attrs):
        from opbridge.export.contrib import onnx_schema

        schema = onnx_schema(op_type)
        qualified = f"{schema.domain}::{op_type}" if schema.domain else op_type
        named = {f"{name}_{_LEGACY_SUFFIX[type(value)]}": value for name, value in attrs.items()}
        results = self.g.op(qualified, *inputs, outputs=len(schema.outputs), **named)
        results = tuple(results) if isinstance(results, list | tuple) else (results,)
        # The TorchScript exporter cannot infer an ONNX Runtime node's
        # outputs; each one the forms read has the first input's dtype and
        # rank (sizes left open: traced sizes would be folded into later
        # Shape nodes and break dynamic axes).
        first = inputs[0].type()
        sizes = first.varyingSizes()
        for result in results[:outputs]:
            result.setType(first if sizes is None else first.with_sizes([None] * len(sizes)))
        return results[0] if outputs == 1 else results[:outputs]

    def shape(self, value):
        try:
            sizes = value.type().varyingSizes()
        except Exception:
            return None
        return None if sizes is None else list(sizes)

    def constant(self, value, like):
        import torch

        torch_dtype = _dtypes.TORCH.get(self.float_dtype(like) or "")
        if torch_dtype is not None and torch_dtype not in _dtypes.HALF:
            return self.g.op("Constant", value_t=torch.tensor(value, dtype=torch_dtype))
        return self.g.op(
            "CastLike", self.g.op("Constant", value_t=torch.tensor(float(value))), like
        )

    def ints(self, values):
        import torch

        return self.g.op("Constant", value_t=torch.tensor(values, dtype=torch.int64))

    def int_scalar(self, value):
        import torch

        return self.g.op("Constant", value_t=torch.tensor(value, dtype=torch.int64))

    def float_dtype(self, value):
        try:
            scalar = value.type().scalarType()
        except Exception:
            return None
        name = _dtypes.FROM_TORCHSCRIPT.get(scalar)
        return name if name in _dtypes.FLOATING else None

    def floats(self, values, like):
        import torch

        torch_dtype = torch.float64 if self.float_dtype(like) == "float64" else torch.float32
        return self.g.op("Constant", value_t=torch.tensor(values, dtype=torch_dtype))

    def dtype(self, value):
        try:
            scalar = value.type().scalarType()
        except Exception:
            return None
        return _dtypes.FROM_TORCHSCRIPT.get(scalar)


# Output element types that are not the first input's (by ONNX's operator
# definitions); any other operator keeps its first typed input's.
_INT64_RESULTS = {"Shape", "Size", "ArgMax", "ArgMin", "NonZero"}
_BOOL_RESULTS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or"}
_BOOL_RESULTS |= {"Xor", "IsNaN", "IsInf"}


class ProtoValue:
    """A value of a :class:`ProtoBuilder` body: its name, and its element
    type and dimensions when known (``shape``: None for an unknown rank, a
    None entry for a dynamic dimension)."""

    def __init__(self, name: str, dtype: str | None = None, shape: list | None = None):
        self.name, self.dtype = name, dtype
        self.shape = None if shape is None else list(shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __repr__(self) -> str:
        return f"ProtoValue({self.name!r}, {self.dtype!r}, {self.shape!r})"


class ProtoBuilder(Builder):
    """Emits a decomposition as ``onnx.NodeProto``s (``nodes``): the body of
    an ONNX function. Inputs are :class:`ProtoValue`s with the dimensions the
    model fixes (its dynamic ones None), as the exporters' builders see them;
    intermediate values have no known dimensions."""

    def __init__(self, opset: int, avoid: frozenset[str] = frozenset()):
        self.opset, self.avoid = opset, frozenset(avoid)
        self.nodes: list[Any] = []
        self._count = 0

    def _fresh(self) -> str:
        self._count += 1
        return f"t{self._count}"

    def _emit(self, op_type: str, inputs: tuple, attrs: dict, dtype, domain=""):
        from onnx import helper

        names = ["" if value is None else value.name for value in inputs]
        while names and not names[-1]:
            names.pop()
        output = ProtoValue(self._fresh(), dtype)
        node = helper.make_node(op_type, names, [output.name], domain=domain, **attrs)
        self.nodes.append(node)
        return output

    def _result_dtype(self, op_type: str, inputs: tuple, attrs: dict) -> str | None:

        if op_type in _INT64_RESULTS:
            return "int64"
        if op_type in _BOOL_RESULTS:
            return "bool"
        if op_type == "Cast":
            return _dtypes.FROM_ONNX.get(attrs["to"])
        if op_type == "CastLike":
            return inputs[1].dtype if inputs[1] is not None else None
        for value in inputs:
            if value is not None and value.dtype is not None:
                return value.dtype
        return None

    def op(self, op_type, *inputs, **attrs):
        dtype = self._result_dtype(op_type, inputs, attrs)
        return self._emit(op_type, inputs, attrs, dtype)

    def contrib(self, op_type, *inputs, outputs=1, **attrs):
        raise NotImplementedError(
            f"a function body is made of ai.onnx operators; {op_type} is ONNX Runtime's own"
        )

    def shape(self, value):
        shape = getattr(value, "shape", None)
        return None if shape is None else list(shape)

    def _tensor(self, array: np.ndarray):
        from onnx import numpy_helper

        node_value = self._emit("Constant", (), {"value": numpy_helper.from_array(array)}, None)
        node_value.dtype, node_value.shape = array.dtype.name, list(array.shape)
        return node_value

    def constant(self, value, like):
        dtype = self.float_dtype(like)
        if dtype is not None:
            return self._tensor(np.array(value, dtype=dtype))
        return self.op("CastLike", self._tensor(np.array(value, dtype=np.float32)), like)

    def ints(self, values):
        return self._tensor(np.array(values, dtype=np.int64))

    def int_scalar(self, value):
        return self._tensor(np.array(value, dtype=np.int64))

    def float_dtype(self, value):
        dtype = getattr(value, "dtype", None)
        return dtype if dtype in _dtypes.FLOATING else None

    def floats(self, values, like):
        dtype = self.float_dtype(like) or "float32"
        if dtype == "bfloat16":
            import ml_dtypes

            return self._tensor(np.array(values, dtype=np.float32).astype(ml_dtypes.bfloat16))
        return self._tensor(np.array(values, dtype=dtype))

    def dtype(self, value):
        return getattr(value, "dtype", None)
