"""Checks of an ONNX model's structure before any number is compared:
``onnx.checker``, opset imports, the route's rule for library nodes, every
library node against its operator's spec, opbridge metadata against the
loaded library, and graph inputs and outputs against PyTorch's."""

from __future__ import annotations

import torch

from opbridge._library import ONNX_DOMAIN, ONNX_DOMAIN_VERSION, VERSION, libraries
from opbridge.export import exportable, routes
from opbridge.export.metadata import (
    METADATA_DOMAIN_VERSION_KEY,
    METADATA_ROUTE_KEY,
    METADATA_VERSION_KEY,
)
from opbridge.export.routes.custom import nodes_match_specs
from opbridge.verify.status import FAIL, PASS, WARN, Check, one_line


def structure_checks(model, route: str, torch_model, inputs, outputs) -> list[Check]:
    """Every structure check of ``model`` (exported by ``route``) against the
    PyTorch model and its example ``inputs`` and ``outputs`` (tensors)."""
    from opbridge.export.contrib import check_model

    checks = []
    try:
        check_model(model, full_check=True)
        checks.append(Check("onnx.checker", PASS, "check_model(full_check=True)"))
    except Exception as error:
        checks.append(Check("onnx.checker", FAIL, one_line(error)))

    imports = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    node_domains = {n.domain or "ai.onnx" for n in model.graph.node}
    problems = [f"nodes use domain {d!r}, not imported" for d in node_domains - imports.keys()]
    for lib in libraries():
        if lib.onnx_domain in imports and imports[lib.onnx_domain] != lib.domain_version:
            problems.append(
                f"imports {lib.onnx_domain} version {imports[lib.onnx_domain]}, "
                f"{lib.name} implements version {lib.domain_version}"
            )
    text = ", ".join(f"{d} {v}" for d, v in sorted(imports.items()))
    checks.append(Check("opset imports", FAIL if problems else PASS, "; ".join(problems) or text))

    checks.append(_route_check(model, route))
    checks.append(_check_metadata(model))
    checks.append(_check_io("input", [io_info(v) for v in graph_inputs(model)], inputs))
    checks.append(_check_io("output", [io_info(v) for v in model.graph.output], outputs))
    if torch_model.training:
        checks.append(
            Check(
                "PyTorch model mode",
                WARN,
                "the model is in training mode (dropout, batch-norm statistics); "
                "call model.eval() before verifying",
            )
        )
    return checks


def _route_check(model, route: str) -> Check:
    """The route's rule for the graph; a plan per operator ("auto",
    "per-op") may hold library nodes, which must match their specs."""
    found = routes.routes().get(route)
    check = (found.check if found is not None else nodes_match_specs)(model, exportable())
    return Check(check.title, PASS if check.passed else FAIL, check.detail)


def graph_inputs(model) -> list:
    """The model's inputs that are not initializers."""
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def io_info(value_info) -> dict:
    """An input or output: name, dtype, shape (None or a name for a dynamic
    dimension) and the positions of its dynamic dimensions."""
    import onnx

    tensor = value_info.type.tensor_type
    dims = _dims(value_info)
    return {
        "name": value_info.name,
        "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        if tensor.elem_type
        else "unknown",
        "shape": dims,
        "dynamic_dims": [i for i, d in enumerate(dims) if not isinstance(d, int)],
    }


def shape_text(shape: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def dynamic_axes(inputs: list[dict]) -> tuple[bool, bool]:
    """Whether the graph's inputs (as :func:`io_info` describes them) have a
    dynamic batch (dimension 0 of the first input) and a dynamic sequence
    (dimension 1 of an input of two or more dimensions): a named or unknown
    dimension, not a fixed size."""
    batch = bool(inputs) and bool(inputs[0]["shape"]) and 0 in inputs[0]["dynamic_dims"]
    sequence = any(len(i["shape"]) >= 2 and 1 in i["dynamic_dims"] for i in inputs)
    return batch, sequence


def shapes_line(inputs: list[dict]) -> str:
    """What the graph's inputs make dynamic, in words, with their shapes."""
    batch, sequence = dynamic_axes(inputs)
    if not any(i["shape"] for i in inputs):
        parts = ["no batch dimension"]
    else:
        parts = ["dynamic batch" if batch else "static batch"]
    if any(len(i["shape"]) >= 2 for i in inputs):
        parts.append("dynamic sequence" if sequence else "static sequence")
    described = "; ".join(f"{i['name']} {shape_text(i['shape'])}" for i in inputs)
    return f"{', '.join(parts)} (graph inputs: {described or 'none'})"


def _dims(value_info) -> list[int | str | None]:
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    dims = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or None)
    return dims


def _check_io(kind: str, infos: list[dict], tensors: list[torch.Tensor]) -> Check:
    problems = []
    if len(infos) != len(tensors):
        problems.append(f"{len(infos)} {kind}s in ONNX, {len(tensors)} tensors in PyTorch")
    for info, tensor in zip(infos, tensors, strict=False):
        if info["dtype"] != str(tensor.dtype).removeprefix("torch."):
            problems.append(f"{info['name']}: dtype {info['dtype']} vs {tensor.dtype}")
        shape = info["shape"]
        if shape and len(shape) != tensor.dim():
            problems.append(f"{info['name']}: rank {len(shape)} vs {tensor.dim()}")
            continue
        for axis, (dim, size) in enumerate(zip(shape, tensor.shape, strict=False)):
            if isinstance(dim, int) and dim != size:
                problems.append(f"{info['name']}: dim {axis} is {dim}, PyTorch has {size}")
    described = "; ".join(
        f"{i['name']} {i['dtype']}{shape_text(i['shape'])}"
        + (f" dynamic dims {i['dynamic_dims']}" if i["dynamic_dims"] else "")
        for i in infos
    )
    if problems:
        return Check(f"{kind}s", FAIL, "; ".join(problems))
    return Check(f"{kind}s", PASS, described)


def _check_metadata(model) -> Check:
    metadata = {p.key: p.value for p in model.metadata_props}
    version = metadata.get(METADATA_VERSION_KEY)
    domain_version = metadata.get(METADATA_DOMAIN_VERSION_KEY)
    if version is None:
        status = WARN
        detail = f"no {METADATA_VERSION_KEY} metadata (not exported by opbridge.export.export)"
    elif domain_version is not None and domain_version != str(ONNX_DOMAIN_VERSION):
        status = FAIL
        detail = (
            f"model needs {ONNX_DOMAIN} domain version {domain_version}, "
            f"library {VERSION} implements {ONNX_DOMAIN_VERSION}"
        )
    elif version != VERSION:
        status = WARN
        detail = f"exported with opbridge {version}, running with {VERSION}"
    else:
        status = PASS
        detail = (
            f"opbridge {version}, domain version {domain_version}, "
            f"route {metadata.get(METADATA_ROUTE_KEY, '?')}; library {VERSION}"
        )
    return Check("metadata vs library", status, detail)
