"""Route ``standard``: ai.onnx operators only, loadable by any runtime, in
the best form the opset has (RMSNormalization, RotaryEmbedding and Gelu where
the opset defines them)."""

from __future__ import annotations

from opbridge._library import library_nodes
from opbridge.export.routes.base import Route, StructureCheck


def no_library_node(route: str, done: str):
    """The check of a route that leaves no library node: ``done`` describes a
    graph without one ("all N nodes ...")."""

    def check(model, libraries: list) -> StructureCheck:
        custom = library_nodes(model, libraries)
        if custom:
            kinds = ", ".join(sorted({n.op_type for n in custom}))
            domains = "/".join(sorted({n.domain for n in custom}))
            detail = f"{len(custom)} {domains} nodes: {kinds}"
        else:
            detail = f"all {len(model.graph.node)} nodes {done}"
        return StructureCheck(f"{route} route: no opbridge node", not custom, detail)

    return check


ROUTE = Route(
    name="standard",
    needs_library=False,
    library_node=False,
    # The op's standard form: the card's, or the export's error that names
    # the op when it has none.
    form=lambda card: None,
    # Always a candidate.
    own_form=lambda card: True,
    check=no_library_node("standard", "are standard ONNX"),
    bench_name="standard",
    summary="plain ai.onnx operators: any runtime, no library",
    auto_rank=2,
    bench_base_level=True,
)
