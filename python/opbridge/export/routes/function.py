"""Route ``function``: the custom route's library nodes, each with a
model-local ONNX function of the same domain and op type whose body is the
op's standard form. One file runs with and without the library: ONNX
Runtime without it runs the bodies, ONNX Runtime (or OpenVINO) with it
registered runs its kernels (:mod:`opbridge.export.functions`). Stock
OpenVINO refuses the file (its ONNX reader converts a function call only
where an extension knows the domain); opbridge's OpenVINO session inlines
the bodies itself."""

from __future__ import annotations

from opbridge._library import library_nodes
from opbridge.export.functions import add_functions, library_functions
from opbridge.export.routes.base import Route, StructureCheck
from opbridge.export.routes.custom import nodes_match_specs

TITLE = "opbridge nodes match the specs and have function bodies"


def nodes_have_bodies(model, libraries: list) -> StructureCheck:
    """The custom route's check, and: every library node has a function of
    its domain, op type and overload, made of ai.onnx operators only."""
    specs = nodes_match_specs(model, libraries)
    problems = [specs.detail] if not specs.passed else []
    functions = library_functions(model)
    nodes = library_nodes(model, libraries)
    for index, node in enumerate(nodes):
        function = functions.get((node.domain, node.op_type, node.overload))
        where = f"node {node.name or index} ({node.domain}::{node.op_type})"
        if function is None:
            overload = f" overload {node.overload!r}" if node.overload else ""
            problems.append(f"{where}: no model-local function{overload}")
            continue
        foreign = sorted({n.domain for n in function.node if n.domain not in ("", "ai.onnx")})
        if foreign:
            problems.append(f"{where}: its function uses domains {foreign}, not ai.onnx only")
    if problems:
        return StructureCheck(TITLE, False, "; ".join(problems))
    return StructureCheck(
        TITLE, True, f"{len(nodes)} nodes, {len(functions)} functions of ai.onnx operators"
    )


ROUTE = Route(
    name="function",
    needs_library=False,
    library_node=True,
    form=lambda card: None,
    # Where the library is loaded it runs the custom route's kernel, where it
    # is not the standard form: route="auto" measures those two routes.
    own_form=lambda card: False,
    check=nodes_have_bodies,
    bench_name="function",
    summary=(
        "library nodes with standard-op bodies: the kernels where the library is, "
        "the bodies in a stock ONNX Runtime"
    ),
    auto_rank=3,
    # Its bodies are added by opbridge.export.export, after PyTorch's exporter.
    door=False,
    finish=add_functions,
)
