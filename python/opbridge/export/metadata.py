"""The metadata opbridge stamps on an exported model: its version, the
libraries' domain versions and the route of each operator."""

from __future__ import annotations

from opbridge._library import (
    METADATA_DOMAIN_VERSION_PREFIX,
    ONNX_DOMAIN_VERSION,
    VERSION,
    libraries,
    library_for_domain,
)
from opbridge.export.routes.plan import ExportPlan

METADATA_VERSION_KEY = "opbridge.version"


METADATA_DOMAIN_VERSION_KEY = "opbridge.domain_version"


METADATA_ROUTE_KEY = "opbridge.route"


# Per operator, when the routes differ by operator: "opbridge.route.<namespace>::<op>".
METADATA_OP_ROUTE_PREFIX = "opbridge.route."


def stamp_metadata(model, plan: ExportPlan):
    """Adds opbridge's metadata and drops unused opset imports of library domains.

    Every library domain the graph uses is imported at the library's version
    and recorded as ``opbridge.domain_version.<domain>``. The route is
    ``opbridge.route``: the plan's one route, or for a plan given per
    operator its label ("auto" when :mod:`opbridge.autoroute` chose it, else
    "per-op") and one ``opbridge.route.<namespace>::<op>`` entry per
    operator it names.
    """
    import onnx

    used = {node.domain for node in model.graph.node}
    kept = []
    for imp in model.opset_import:
        library = library_for_domain(imp.domain)
        if library is None or imp.domain in used:
            kept.append(imp)
    props = {p.key: p.value for p in model.metadata_props}
    for library in libraries():
        if library.onnx_domain not in used:
            continue
        if not any(imp.domain == library.onnx_domain for imp in kept):
            kept.append(onnx.helper.make_opsetid(library.onnx_domain, library.domain_version))
        props[METADATA_DOMAIN_VERSION_PREFIX + library.onnx_domain] = str(library.domain_version)
    del model.opset_import[:]
    model.opset_import.extend(kept)
    props[METADATA_VERSION_KEY] = VERSION
    props[METADATA_DOMAIN_VERSION_KEY] = str(ONNX_DOMAIN_VERSION)
    props[METADATA_ROUTE_KEY] = plan.label or plan.default.name
    for op, route in sorted(plan.per_op.items()):
        props[METADATA_OP_ROUTE_PREFIX + op] = route.name
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


def set_library_domain_versions(proto) -> None:
    """Imports each loaded library's domain at the library's version (the
    legacy exporter imports a custom domain it is not told of at version 1),
    in the graph and in its local functions."""
    for imports in (proto.opset_import, *(f.opset_import for f in proto.functions)):
        for imp in imports:
            library = library_for_domain(imp.domain)
            if library is not None:
                imp.version = library.domain_version
