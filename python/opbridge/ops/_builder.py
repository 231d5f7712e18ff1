"""One way to write a standard-route decomposition for both exporters.

A decomposition is a function ``(b, *inputs, **attrs)`` that calls
``b.op(op_type, *inputs, **attrs)``; :class:`DynamoBuilder` emits through
onnxscript (the dynamo exporter's custom translation table) and
:class:`LegacyBuilder` through the TorchScript graph context
(``torch.onnx.register_custom_op_symbolic``). ``b.opset`` is the target ONNX
opset, so a decomposition can choose the form that opset has.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Builder:
    opset: int

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        raise NotImplementedError

    def constant(self, value: float, like: Any) -> Any:
        """A scalar of ``like``'s dtype."""
        raise NotImplementedError

    def ints(self, values: list[int]) -> Any:
        """A 1-D int64 tensor (axes, shapes)."""
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

    def constant(self, value, like):
        import onnx_ir as ir

        dtype = self.float_dtype(like)
        if dtype is not None:
            return self.op("Constant", value=ir.tensor(np.array(value, dtype=dtype)))
        return self.op("CastLike", self.op("Constant", value_float=float(value)), like)

    def ints(self, values):
        import onnx_ir as ir

        return self.op("Constant", value=ir.tensor(np.array(values, dtype=np.int64)))

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
