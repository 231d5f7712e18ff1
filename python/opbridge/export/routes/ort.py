"""Route ``ort``: ONNX Runtime's own fused operators where one computes
exactly the op's result (``com.microsoft`` contrib operators, and ONNX
Runtime's ai.onnx-domain SimplifiedLayerNormalization), the standard form
elsewhere: runs in a stock ONNX Runtime, no custom-op library."""

from __future__ import annotations

from opbridge.export.routes.base import Route
from opbridge.export.routes.standard import no_library_node


def _own(card):
    return None if card is None else card.form("ort")


ROUTE = Route(
    name="ort",
    needs_library=False,
    library_node=False,
    form=_own,
    own_form=lambda card: _own(card) is not None,
    check=no_library_node("ort", "run without an opbridge library"),
    bench_name="fused",
    summary="ONNX Runtime's own fused operators where exact, else standard",
    auto_rank=1,
    runtime_ops=True,
)
