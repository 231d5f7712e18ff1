"""Route ``custom``: one node per operator in its library's domain
(``opbridge`` for the built-in operators), with the spec's attribute names;
a model made by it needs that library's runtime library."""

from __future__ import annotations

from opbridge.export.nodes import attribute_proto_type
from opbridge.export.routes.base import Route, StructureCheck

TITLE = "opbridge nodes match the specs"


def nodes_match_specs(model, libraries: list) -> StructureCheck:
    """Every library node against its operator's spec: op type, input and
    output counts, attribute names and types, none missing or unknown."""
    import onnx

    by_type = {
        (lib.onnx_domain, spec["onnx_type"]): spec
        for lib in libraries
        for spec in lib.specs().values()
    }
    domains = {lib.onnx_domain for lib in libraries}
    problems = []
    count = 0
    for index, node in enumerate(model.graph.node):
        if node.domain not in domains:
            continue
        count += 1
        where = f"node {node.name or index} ({node.op_type})"
        spec = by_type.get((node.domain, node.op_type))
        if spec is None:
            problems.append(f"{where}: no operator {node.op_type!r} in {node.domain}")
            continue
        required = [p["name"] for p in spec["inputs"] if not p["optional"]]
        n_inputs = len(node.input)
        if n_inputs > len(spec["inputs"]):
            problems.append(f"{where}: {n_inputs} inputs, the spec has {len(spec['inputs'])}")
        for position, name in enumerate(p["name"] for p in spec["inputs"]):
            if name in required and (position >= n_inputs or not node.input[position]):
                problems.append(f"{where}: required input {name!r} is missing")
        if len(node.output) != len(spec["outputs"]):
            problems.append(
                f"{where}: {len(node.output)} outputs, the spec has {len(spec['outputs'])}"
            )
        wanted = {a["name"]: a for a in spec["attrs"]}
        present = {a.name: a for a in node.attribute}
        for name in present.keys() - wanted.keys():
            problems.append(f"{where}: unknown attribute {name!r} (spec has {sorted(wanted)})")
        for name, attr in wanted.items():
            if name not in present:
                problems.append(f"{where}: attribute {name!r} is missing")
                continue
            expected = attribute_proto_type(attr["type"])
            if present[name].type != expected:
                got = onnx.AttributeProto.AttributeType.Name(present[name].type)
                want = onnx.AttributeProto.AttributeType.Name(expected)
                problems.append(f"{where}: attribute {name!r} is {got}, the spec says {want}")
    if problems:
        return StructureCheck(TITLE, False, "; ".join(problems))
    return StructureCheck(TITLE, True, f"{count} nodes: op types, inputs, attributes")


ROUTE = Route(
    name="custom",
    needs_library=True,
    library_node=True,
    form=lambda card: None,
    own_form=lambda card: True,
    check=nodes_match_specs,
    bench_name="custom",
    summary="one node per operator in the library's domain: fastest, needs the library",
    auto_rank=0,
)
