"""One way to write a standard-route decomposition for both exporters.

A decomposition is a function ``(b, *inputs, **attrs)`` that calls
``b.op(op_type, *inputs, **attrs)``; :class:`DynamoBuilder` emits through
onnxscript (the dynamo exporter's custom translation table) and
:class:`LegacyBuilder` through the TorchScript graph context
(``torch.onnx.register_custom_op_symbolic``). ``b.opset`` is the target ONNX
opset, so a decomposition can choose the form that opset has.

An ``ort``-route form also emits ONNX Runtime's own operators with
``b.contrib(op_type, *inputs, outputs=n, **attrs)`` (their domains and
signatures: :data:`opbridge.ops._contrib.SCHEMAS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Builder:
    opset: int

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        raise NotImplementedError

    def contrib(self, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """One node of an ONNX Runtime operator of :data:`opbridge.ops._contrib.SCHEMAS`.

        Returns its first output, or a tuple of the first ``outputs``; the
        node gets every output of the schema, and the export drops those no
        node reads (:func:`opbridge.ops._contrib.drop_unused_outputs`)."""
        raise NotImplementedError

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
    def __init__(self, opset: int):
        import onnxscript

        self.opset = opset
        self._ops = onnxscript.values.Opset("", opset)

    def op(self, op_type, *inputs, **attrs):
        return getattr(self._ops, op_type)(*inputs, **attrs)

    def contrib(self, op_type, *inputs, outputs=1, **attrs):
        import onnxscript

        from opbridge.ops.contrib import onnx_schema

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


class LegacyBuilder(Builder):
    def __init__(self, g: Any, opset: int):
        self.g = g
        self.opset = opset

    def op(self, op_type, *inputs, **attrs):
        named = {}
        for name, value in attrs.items():
            sample = value[0] if isinstance(value, list | tuple) else value
            named[f"{name}_{_LEGACY_SUFFIX[type(sample)]}"] = value
        return self.g.op(op_type, *inputs, **named)

    def contrib(self, op_type, *inputs, outputs=1, **attrs):
        from opbridge.ops.contrib import onnx_schema

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

        dtype = self.float_dtype(like)
        torch_dtype = {"float32": torch.float32, "float64": torch.float64}.get(dtype or "")
        if torch_dtype is not None:
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
        return {
            "Float": "float32",
            "Double": "float64",
            "Half": "float16",
            "BFloat16": "bfloat16",
        }.get(scalar)

    def floats(self, values, like):
        import torch

        torch_dtype = torch.float64 if self.float_dtype(like) == "float64" else torch.float32
        return self.g.op("Constant", value_t=torch.tensor(values, dtype=torch_dtype))

    def dtype(self, value):
        try:
            scalar = value.type().scalarType()
        except Exception:
            return None
        return self.float_dtype(value) or {"Byte": "uint8", "Long": "int64", "Int": "int32"}.get(
            scalar
        )
