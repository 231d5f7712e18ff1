"""The dtypes the specs name, and what each framework calls them: one table.

Every module that turns a dtype into a spec's name (``"float32"``) or back
reads it here; ``./dev lint`` (``scripts/check_one_name.py``) refuses a
second table. The C++ side has its own, ``csrc/opbridge/dtype.h`` (the same names and
ONNX numbers; a test holds the two equal).
"""

from __future__ import annotations

import torch

# (the specs' name, torch dtype, the legacy exporter's torch.Value scalar
# type, OpenVINO's element type, ONNX's TensorProto element type, ONNX's
# type name in a schema's ``tensor(...)``); floating dtypes first.
_TABLE = (
    ("float32", torch.float32, "Float", "f32", 1, "float"),
    ("float64", torch.float64, "Double", "f64", 11, "double"),
    ("float16", torch.float16, "Half", "f16", 10, "float16"),
    ("bfloat16", torch.bfloat16, "BFloat16", "bf16", 16, "bfloat16"),
    ("uint8", torch.uint8, "Byte", "u8", 2, "uint8"),
    ("int8", torch.int8, "Char", "i8", 3, "int8"),
    ("int16", torch.int16, "Short", "i16", 5, "int16"),
    ("int32", torch.int32, "Int", "i32", 6, "int32"),
    ("int64", torch.int64, "Long", "i64", 7, "int64"),
    ("bool", torch.bool, "Bool", "boolean", 9, "bool"),
)

#: torch dtype by the specs' name.
TORCH = {row[0]: row[1] for row in _TABLE}
#: The specs' name by torch dtype.
NAMES = {row[1]: row[0] for row in _TABLE}
#: The specs' name by the legacy exporter's scalar type (``torch.Value``).
FROM_TORCHSCRIPT = {row[2]: row[0] for row in _TABLE}
#: The specs' name by OpenVINO's element type name.
FROM_OPENVINO = {row[3]: row[0] for row in _TABLE}
#: ONNX's element type (``onnx.TensorProto.FLOAT``, ...) by the specs' name.
ONNX = {row[0]: row[4] for row in _TABLE}
#: The specs' name by ONNX's element type.
FROM_ONNX = {row[4]: row[0] for row in _TABLE}
#: ONNX's type name (``tensor(float)`` names ``"float"``) by the specs' name.
ONNX_TYPE_NAMES = {row[0]: row[5] for row in _TABLE}
#: The floating dtypes, by the specs' name.
FLOATING = {name: dtype for name, dtype in TORCH.items() if dtype.is_floating_point}
#: The 16-bit floating dtypes (computed in float32 by the kernels).
HALF = (torch.float16, torch.bfloat16)
