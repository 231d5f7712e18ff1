"""Proves that a model computes the same numbers in PyTorch and ONNX Runtime.

:func:`verify` exports a model (or takes an ONNX model as given), checks its
structure against the opbridge specs, and compares ONNX Runtime with PyTorch:

* the final outputs, element by element: ``|ort - torch| <= atol + rtol * |torch|``;
* layer by layer: the output of every named submodule (a forward hook in
  PyTorch) against the value the exporter produced for that module (the
  output of the last node in the module's scope, exposed as an extra graph
  output), so the first module whose output diverges is named;
* sweeps that expose silent failures: every ONNX Runtime graph optimization
  level (a level whose results differ from ``disable_all`` is a fusion
  problem), batch sizes 1, the export batch and a large one, and several input
  draws (random, or the caller's own).

The result is a :class:`VerificationReport`: ``report.passed``,
``report.first_divergence``, a terminal table (``str(report)``), JSON
(``report.to_json()``) and a per-layer error plot (``report.plot(path)``).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from opbridge._library import ONNX_DOMAIN, ONNX_DOMAIN_VERSION, VERSION, libraries
from opbridge.onnx import (
    LIBRARY_FREE_ROUTES,
    METADATA_DOMAIN_VERSION_KEY,
    METADATA_ROUTE_KEY,
    METADATA_VERSION_KEY,
    ROUTES,
)
from opbridge.onnx import export as export_onnx
from opbridge.ort import InferenceSession, load_model

# ONNX Runtime's graph optimization levels, least to most, by the name used in
# reports; ORT_ENABLE_LAYOUT only exists in newer runtimes.
LEVEL_ENUMS = {
    "disable_all": "ORT_DISABLE_ALL",
    "enable_basic": "ORT_ENABLE_BASIC",
    "enable_extended": "ORT_ENABLE_EXTENDED",
    "enable_layout": "ORT_ENABLE_LAYOUT",
    "enable_all": "ORT_ENABLE_ALL",
}
# Results of every level are compared with this one: it runs the graph as exported.
BASE_LEVEL = "disable_all"
# The level a deployed session uses by default; the final-output section reports it.
DEFAULT_LEVEL = "enable_all"
LARGE_BATCH_MIN = 16
# Default tolerances (rtol, atol) by the dtype of the PyTorch output: float64
# gets torch.testing's, tight enough to catch a float32-sized error.
DEFAULT_TOLERANCE = (1e-5, 1e-5)
DEFAULT_TOLERANCE_FLOAT64 = (1e-7, 1e-7)

_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_NAMESPACE_KEY = "namespace"

# Statuses of a check, a sweep cell or a layer.
PASS, FAIL, WARN, NOT_APPLICABLE = "pass", "fail", "warn", "n/a"

SessionFactory = Callable[[bytes, str], Any]


def available_levels() -> list[str]:
    """The optimization levels the installed ONNX Runtime has, least to most."""
    import onnxruntime

    members = onnxruntime.GraphOptimizationLevel.__members__
    return [name for name, enum in LEVEL_ENUMS.items() if enum in members]


def default_session_factory(model: bytes, level: str):
    """An ONNX Runtime session (opbridge library registered) at ``level``."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = getattr(
        onnxruntime.GraphOptimizationLevel, LEVEL_ENUMS[level]
    )
    return InferenceSession(model, sess_options=options)


# ------------------------------------------------------------------ report


@dataclass
class Stats:
    min: float
    max: float
    mean: float
    var: float


@dataclass
class Comparison:
    """ONNX Runtime (``ort``) against PyTorch (``torch``, the reference) for one tensor."""

    name: str
    shape: list[int]
    passed: bool
    max_abs_err: float
    max_rel_err: float  # over elements with |torch| > atol; the others are atol's business
    cosine: float
    # max |ort - torch| / (atol + rtol * |torch|): at most 1 where every element passes
    tolerance_ratio: float
    mismatched: int  # elements that fail the tolerance
    torch: Stats | None
    ort: Stats | None
    detail: str = ""
    # Elements finite on both sides; with 0 nothing was compared, which fails.
    compared: int | None = None


@dataclass
class Check:
    name: str
    status: str  # pass, fail, warn or n/a
    detail: str


@dataclass
class Cell:
    """One run: an input case at one optimization level, all outputs compared."""

    case: str
    batch: int | None
    level: str
    status: str
    max_abs_err: float
    max_rel_err: float
    # Against the same case at BASE_LEVEL (None for BASE_LEVEL itself).
    max_abs_diff_vs_base: float | None = None
    error: str = ""


@dataclass
class LayerResult:
    """A named submodule's output, PyTorch against the ONNX value mapped to it."""

    module: str
    onnx_values: list[str]
    status: str  # pass, fail, or n/a when it could not be compared
    # The worst comparison over every case and level that ran layer by layer.
    worst: Comparison | None = None
    case: str = ""
    level: str = ""
    detail: str = ""


@dataclass
class VerificationReport:
    """What :func:`verify` found; ``passed`` is True only when everything agreed."""

    passed: bool
    route: str
    rtol: float  # for every output dtype but float64
    atol: float
    model_source: str  # "exported (...)" or where the given model came from
    structure: list[Check] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    outputs_info: list[dict] = field(default_factory=list)
    # Final outputs: the example inputs at DEFAULT_LEVEL.
    outputs: list[Comparison] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    fusion_problems: list[str] = field(default_factory=list)
    batch_sweep: str = ""  # "ran: 1, 4, 16" or why it did not apply
    layer_mapping: str = ""  # "available (...)" or why layer-by-layer did not run
    layers: list[LayerResult] = field(default_factory=list)
    first_divergence: str | None = None
    errors: list[str] = field(default_factory=list)
    # For float64 outputs (the same as rtol/atol when those were given).
    rtol_float64: float = 0.0
    atol_float64: float = 0.0
    onnx_model: Any = field(default=None, repr=False)

    @property
    def max_abs_err(self) -> float:
        """The largest final-output error over every run (case and level)."""
        return max((c.max_abs_err for c in self.cells), default=float("nan"))

    @property
    def layers_compared(self) -> int:
        return sum(r.worst is not None for r in self.layers)

    @property
    def first_divergence_layer(self) -> LayerResult | None:
        return next((r for r in self.layers if r.module == self.first_divergence), None)

    def failures(self) -> list[str]:
        """One line per kind of failure, most telling first."""
        lines = [f"structure: {c.name}: {c.detail}" for c in self.structure if c.status == FAIL]
        lines += [f"final output {c.name}: {_describe(c)}" for c in self.outputs if not c.passed]
        crashed = [c for c in self.cells if c.status == FAIL and c.error]
        lines += [f"run {c.case} at {c.level}: {c.error}" for c in crashed]
        off = [c for c in self.cells if c.status == FAIL and not c.error]
        if off:
            worst = max(off, key=lambda c: c.max_abs_err)
            lines.append(
                f"runs: {len(off)} of {len(self.cells)} (case, level) runs out of tolerance; "
                f"worst {worst.case} at {worst.level}, max abs err {_fmt(worst.max_abs_err)}"
            )
        lines += [
            f"fusion problem at {level} ({LEVEL_ENUMS[level]}): results differ from {BASE_LEVEL}"
            for level in self.fusion_problems
        ]
        diverging = [r for r in self.layers if r.status == FAIL]
        if diverging:
            first = diverging[0]
            lines.append(
                f"layers: {len(diverging)} modules diverge; first {first.module} "
                f"({first.case}, {first.level}): {_describe(first.worst)}"
            )
        lines += [f"error: {e}" for e in self.errors]
        return lines

    # -------------------------------------------------------------- output

    def to_dict(self) -> dict:
        """Everything in the report as JSON-ready values (non-finite floats as strings)."""
        data = {
            f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "onnx_model"
        }
        data["opbridge_version"] = VERSION
        data["failures"] = self.failures()
        return _json_safe(data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def format(self) -> str:
        return "\n".join(_format_report(self))

    def __str__(self) -> str:
        return self.format()

    def plot(self, path: str | os.PathLike) -> None:
        """Per-layer error on a log scale, first divergence marked (PNG, needs matplotlib)."""
        _plot(self, Path(path))


def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


# ------------------------------------------------------------------ metrics


def _stats(values: np.ndarray, finite: bool) -> Stats | None:
    if values.size == 0:
        return None
    if not finite:
        kept = values[np.isfinite(values)]
        values = kept if kept.size else values
    with np.errstate(invalid="ignore", over="ignore"):
        return Stats(
            float(values.min()), float(values.max()), float(values.mean()), float(values.var())
        )


def compare(name: str, got: Any, want: Any, rtol: float, atol: float) -> Comparison:
    """``got`` (ONNX Runtime) against ``want`` (PyTorch): passes when every
    element satisfies ``|got - want| <= atol + rtol * |want|`` (NaN matches
    NaN, an infinity matches the same infinity) and at least one element is
    finite on both sides (all NaN on both sides compares nothing, and fails).
    The relative error is taken over elements with ``|want| > atol``;
    statistics and cosine similarity over finite elements."""
    a = np.asarray(got, dtype=np.float64)
    b = np.asarray(want, dtype=np.float64)
    if a.shape != b.shape:
        inf = float("inf")
        a_finite, b_finite = bool(np.isfinite(a).all()), bool(np.isfinite(b).all())
        return Comparison(
            name, list(b.shape), False, inf, inf, 0.0, inf, int(b.size),
            _stats(b, b_finite), _stats(a, a_finite),
            detail=f"shape {list(a.shape)} in ONNX Runtime, {list(b.shape)} in PyTorch",
        )  # fmt: skip
    if a.size == 0:
        return Comparison(name, list(b.shape), True, 0.0, 0.0, 1.0, 0.0, 0, None, None)
    a, b = a.ravel(), b.ravel()
    a_finite, b_finite = bool(np.isfinite(a).all()), bool(np.isfinite(b).all())
    all_finite = a_finite and b_finite
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(a - b)
        abs_b = np.abs(b)
        if not all_finite:
            # A non-finite element matches only the same value (NaN matches NaN).
            special = ~(np.isfinite(a) & np.isfinite(b))
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff[special] = np.where(same[special], 0.0, np.inf)
            abs_b[special] = 0.0
        allowed = abs_b * rtol + atol
        ok = diff <= allowed
        # Where nothing is allowed, any difference is infinitely over it.
        ratio = np.divide(diff, allowed, out=np.where(diff > 0, np.inf, 0.0), where=allowed > 0)
        big = abs_b > atol
        rel = np.divide(diff, abs_b, out=np.where(diff > 0, np.inf, 0.0), where=big)
        rel[~big & np.isfinite(diff)] = 0.0
    finite = slice(None) if all_finite else ~special
    fa, fb = a[finite], b[finite]
    mismatched = int(ok.size - np.count_nonzero(ok))
    if fa.size == 0 and mismatched == 0:
        # The same NaN or Inf everywhere: not one number was compared.
        return Comparison(
            name, list(np.shape(want)), False, 0.0, 0.0, 0.0, 0.0, 0, None, None,
            detail=f"nothing compared: all {b.size} elements are NaN or infinite, the same in "
            "PyTorch and ONNX Runtime (are the inputs NaN?)",
            compared=0,
        )  # fmt: skip
    dot = float(np.einsum("i,i->", fa, fb))
    na, nb = math.sqrt(np.einsum("i,i->", fa, fa)), math.sqrt(np.einsum("i,i->", fb, fb))
    if na == 0.0 and nb == 0.0:
        cosine = 1.0
    elif na == 0.0 or nb == 0.0:
        cosine = 0.0
    else:
        cosine = dot / (na * nb)
    return Comparison(
        name=name,
        shape=list(np.shape(want)),
        passed=mismatched == 0,
        max_abs_err=float(diff.max()),
        max_rel_err=float(rel.max()),
        cosine=cosine,
        tolerance_ratio=float(ratio.max()),
        mismatched=mismatched,
        torch=_stats(b, b_finite),
        ort=_stats(a, a_finite),
        compared=int(fa.size),
    )


def _worse(a: Comparison | None, b: Comparison) -> bool:
    """Whether ``b`` is a worse result than ``a``."""
    if a is None:
        return True
    return (not b.passed, b.tolerance_ratio) > (not a.passed, a.tolerance_ratio)


# ------------------------------------------------------------------ structure


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


def _io_info(value_info) -> dict:
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


def _graph_inputs(model) -> list:
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _torch_dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _check_io(kind: str, infos: list[dict], tensors: list[torch.Tensor]) -> Check:
    problems = []
    if len(infos) != len(tensors):
        problems.append(f"{len(infos)} {kind}s in ONNX, {len(tensors)} tensors in PyTorch")
    for info, tensor in zip(infos, tensors, strict=False):
        if info["dtype"] != _torch_dtype_name(tensor):
            problems.append(f"{info['name']}: dtype {info['dtype']} vs {tensor.dtype}")
        shape = info["shape"]
        if shape and len(shape) != tensor.dim():
            problems.append(f"{info['name']}: rank {len(shape)} vs {tensor.dim()}")
            continue
        for axis, (dim, size) in enumerate(zip(shape, tensor.shape, strict=False)):
            if isinstance(dim, int) and dim != size:
                problems.append(f"{info['name']}: dim {axis} is {dim}, PyTorch has {size}")
    described = "; ".join(
        f"{i['name']} {i['dtype']}{_shape_text(i['shape'])}"
        + (f" dynamic dims {i['dynamic_dims']}" if i["dynamic_dims"] else "")
        for i in infos
    )
    if problems:
        return Check(f"{kind}s", FAIL, "; ".join(problems))
    return Check(f"{kind}s", PASS, described)


def _shape_text(shape: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _attribute_type(attr_spec_type: str) -> int:
    import onnx

    from opbridge.onnx import ONNX_ATTRIBUTE_TYPES

    return getattr(onnx.AttributeProto, ONNX_ATTRIBUTE_TYPES[attr_spec_type])


def _check_custom_nodes(model) -> Check:
    """Every opbridge node against its operator's spec: op type, input and
    output counts, attribute names and types, none missing or unknown."""
    import onnx

    by_type = {
        (lib.onnx_domain, spec["onnx_type"]): spec
        for lib in libraries()
        for spec in lib.specs().values()
    }
    domains = {lib.onnx_domain for lib in libraries()}
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
            expected = _attribute_type(attr["type"])
            if present[name].type != expected:
                got = onnx.AttributeProto.AttributeType.Name(present[name].type)
                want = onnx.AttributeProto.AttributeType.Name(expected)
                problems.append(f"{where}: attribute {name!r} is {got}, the spec says {want}")
    if problems:
        return Check("opbridge nodes match the specs", FAIL, "; ".join(problems))
    return Check(
        "opbridge nodes match the specs", PASS, f"{count} nodes: op types, inputs, attributes"
    )


def _structure_checks(model, route: str, torch_model, inputs, outputs) -> list[Check]:

    from opbridge.ops._contrib import check_model

    checks = []
    try:
        check_model(model, full_check=True)
        checks.append(Check("onnx.checker", PASS, "check_model(full_check=True)"))
    except Exception as error:
        checks.append(Check("onnx.checker", FAIL, _one_line(error)))

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

    library_domains = {lib.onnx_domain for lib in libraries()}
    custom = [n for n in model.graph.node if n.domain in library_domains]
    if route in LIBRARY_FREE_ROUTES:
        if custom:
            kinds = ", ".join(sorted({n.op_type for n in custom}))
            domains = "/".join(sorted({n.domain for n in custom}))
            detail = f"{len(custom)} {domains} nodes: {kinds}"
        else:
            detail = f"all {len(model.graph.node)} nodes run in a stock ONNX Runtime"
        checks.append(Check(f"{route} route: no opbridge node", FAIL if custom else PASS, detail))
    else:
        checks.append(_check_custom_nodes(model))

    metadata = {p.key: p.value for p in model.metadata_props}
    version = metadata.get(METADATA_VERSION_KEY)
    domain_version = metadata.get(METADATA_DOMAIN_VERSION_KEY)
    if version is None:
        status = WARN
        detail = f"no {METADATA_VERSION_KEY} metadata (not exported by opbridge.onnx.export)"
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
    checks.append(Check("metadata vs library", status, detail))

    checks.append(_check_io("input", [_io_info(v) for v in _graph_inputs(model)], inputs))
    checks.append(_check_io("output", [_io_info(v) for v in model.graph.output], outputs))
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


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:500]}"


# ------------------------------------------------------------------ inputs


@dataclass
class _Case:
    label: str
    kind: str  # "draw", "batch" or "file"
    batch: int | None
    args: tuple


def _leaves(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _random_like(tensor: torch.Tensor, shape: Sequence[int], generator) -> torch.Tensor:
    """A random tensor of ``shape`` resembling ``tensor`` (same dtype, range or spread)."""
    if tensor.dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=generator).bool().to(tensor.device)
    if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex:
        low = int(tensor.min()) if tensor.numel() else 0
        high = int(tensor.max()) if tensor.numel() else 1
        draw = torch.randint(low, high + 1, tuple(shape), generator=generator, dtype=tensor.dtype)
        return draw.to(tensor.device)
    reference = tensor.detach().double()
    mean = float(reference.mean()) if tensor.numel() else 0.0
    std = float(reference.std()) if tensor.numel() > 1 else 1.0
    if not math.isfinite(std) or std == 0.0:
        std = 1.0
    draw = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    return (mean + std * draw).to(dtype=tensor.dtype, device=tensor.device)


def _redraw(args: tuple, generator, batch: int | None, batched: list[bool]) -> tuple:
    """``args`` with every tensor redrawn; tensors flagged in ``batched`` get ``batch`` rows."""
    leaves, spec = pytree.tree_flatten(args)
    out, index = [], 0
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            shape = list(leaf.shape)
            if batch is not None and index < len(batched) and batched[index]:
                shape[0] = batch
            out.append(_random_like(leaf, shape, generator))
            index += 1
        else:
            out.append(leaf)
    return pytree.tree_unflatten(out, spec)


def _with_tensors(args: tuple, tensors: list[torch.Tensor]) -> tuple:
    leaves, spec = pytree.tree_flatten(args)
    it = iter(tensors)
    return pytree.tree_unflatten(
        [next(it) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec
    )


def load_inputs(source: Any, input_names: list[str], example: tuple) -> list[tuple[str, tuple]]:
    """The caller's input sets as ``(label, args)``: an ``.npz`` path (arrays
    keyed by ONNX input name, or ``arr_0``, ``arr_1``, ... in order), a dict
    of arrays, a sequence of arrays, or a list of any of these."""
    one_set = isinstance(source, Sequence) and all(
        isinstance(item, np.ndarray | torch.Tensor) for item in source
    )
    if isinstance(source, str | os.PathLike | dict) or one_set:
        source = [source]
    n = len(_leaves(example))
    sets = []
    for index, item in enumerate(source):
        label = f"inputs {index}"
        if isinstance(item, str | os.PathLike):
            path = Path(item)
            if not path.is_file():
                raise FileNotFoundError(f"opbridge.verify: input file {path} does not exist")
            with np.load(path) as archive:
                item = {key: archive[key] for key in archive.files}
            label = path.name
        if isinstance(item, dict):
            if all(name in item for name in input_names) and input_names:
                arrays = [item[name] for name in input_names]
            elif len(item) == n:
                arrays = list(item.values())
            else:
                raise ValueError(
                    f"opbridge.verify: {label} holds arrays {sorted(item)}; expected the model's "
                    f"inputs {input_names} (or {n} arrays in order)"
                )
        else:
            arrays = list(item)
        if len(arrays) != n:
            raise ValueError(f"opbridge.verify: {label} has {len(arrays)} arrays, the model {n}")
        tensors = [torch.as_tensor(np.asarray(a)) for a in arrays]
        for tensor, want in zip(tensors, _leaves(example), strict=True):
            if tensor.dtype != want.dtype:
                raise ValueError(
                    f"opbridge.verify: {label}: an input has dtype {tensor.dtype}, "
                    f"the example has {want.dtype}"
                )
        sets.append((label, _with_tensors(example, tensors)))
    return sets


# ------------------------------------------------------------------ layers


def _node_scopes(node) -> list[str] | None:
    """The module paths a node was exported under, outermost first (without
    the root), from the dynamo exporter's metadata; None without it."""
    props = {p.key: p.value for p in node.metadata_props}
    raw = props.get(_SCOPES_KEY)
    if raw is not None:
        try:
            scopes = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return None
        # The last entry names the FX node itself, not a module.
        paths = scopes[:-1]
    elif _NAMESPACE_KEY in props:
        paths = [part.split(": ")[0] for part in props[_NAMESPACE_KEY].split("/")[:-1]]
    else:
        return None
    # A module called again is scoped "name@1" by some exporter versions.
    return [re.sub(r"@\d+$", "", p) for p in paths if p]


def map_modules(model) -> dict[str, list[str]] | None:
    """Module path -> the outputs of the last node exported in that module's
    scope (that module's output); None when the model has no scope metadata."""
    last = {}
    seen_metadata = False
    for node in model.graph.node:
        scopes = _node_scopes(node)
        if scopes is None:
            continue
        seen_metadata = True
        for scope in scopes:
            last[scope] = [name for name in node.output if name]
    return last if seen_metadata else None


def _value_types(model) -> dict[str, int]:
    """Value name -> ONNX element type, from the graph's value_info or, failing
    that, shape inference."""
    import onnx

    def collect(graph) -> dict[str, int]:
        found = {}
        for info in [*graph.value_info, *graph.input, *graph.output]:
            elem = info.type.tensor_type.elem_type
            if elem:
                found[info.name] = elem
        return found

    types = collect(model.graph)
    produced = {name for node in model.graph.node for name in node.output if name}
    if not produced <= types.keys():
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
            types = {**collect(inferred.graph), **types}
        except Exception:
            pass
    return types


def _instrument(model, values: list[str], torch_types: dict[str, int]):
    """A copy of ``model`` that also outputs ``values``."""
    import onnx

    instrumented = onnx.ModelProto()
    instrumented.CopyFrom(model)
    existing = {o.name for o in instrumented.graph.output}
    types = _value_types(model)
    for name in values:
        if name in existing:
            continue
        elem = types.get(name) or torch_types.get(name)
        if elem is None:
            continue
        instrumented.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
        existing.add(name)
    return instrumented, existing


class _Recorder:
    """Forward hooks on every named submodule; the latest output of each, in
    the order the modules finished (a module called twice keeps its last call)."""

    def __init__(self, model: torch.nn.Module):
        self.outputs: dict[str, list[torch.Tensor]] = {}
        self.handles = [
            module.register_forward_hook(self._hook(name))
            for name, module in model.named_modules()
            if name
        ]

    def _hook(self, name: str):
        def hook(_module, _args, output):
            self.outputs.pop(name, None)
            self.outputs[name] = [t.detach().clone() for t in _leaves(output)]

        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


# ------------------------------------------------------------------ verify


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16,):
        tensor = tensor.float()
    return tensor.numpy()


def _export(model, args, route, opset, dynamo, dynamic_shapes, dynamic_batch) -> tuple[Any, str]:
    quiet = {"verbose": False} if dynamo else {}
    first = _leaves(args)
    note = ""
    if dynamic_shapes is None and dynamic_batch and first and first[0].dim() > 0:
        batch = first[0].shape[0]
        dim = torch.export.Dim("batch", min=1)

        def spec(leaf):
            if isinstance(leaf, torch.Tensor) and leaf.dim() > 0 and leaf.shape[0] == batch:
                return {0: dim}
            return None

        auto = tuple(pytree.tree_map(spec, args))
        try:
            proto = export_onnx(
                model, args, route=route, opset=opset, dynamic_shapes=auto, dynamo=dynamo, **quiet
            )
            return proto, f"exported by route {route!r} with a dynamic batch dimension"
        except Exception as error:
            note = f"; a dynamic batch dimension did not export ({_one_line(error)[:200]})"
    proto = export_onnx(
        model,
        args,
        route=route,
        opset=opset,
        dynamic_shapes=dynamic_shapes,
        dynamo=dynamo,
        **quiet,
    )
    return proto, f"exported by route {route!r}{note}"


def _load_model(onnx_model: Any):
    import onnx

    if isinstance(onnx_model, onnx.ModelProto):
        return onnx_model, "given ModelProto"
    if isinstance(onnx_model, bytes):
        return load_model(onnx_model), "given bytes"
    path = Path(onnx_model)
    if not path.is_file():
        raise FileNotFoundError(f"opbridge.verify: ONNX model {path} does not exist")
    proto = load_model(path)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        onnx.load_external_data_for_model(proto, str(path.parent))
    return proto, str(path)


class _Tolerance:
    """(rtol, atol) for a compared tensor: the caller's for every dtype, or
    the default of the PyTorch tensor's dtype."""

    def __init__(self, rtol: float | None, atol: float | None):
        def pick(default: tuple[float, float]) -> tuple[float, float]:
            return (
                float(rtol) if rtol is not None else default[0],
                float(atol) if atol is not None else default[1],
            )

        self.other = pick(DEFAULT_TOLERANCE)
        self.float64 = pick(DEFAULT_TOLERANCE_FLOAT64)

    def of(self, want: Any) -> tuple[float, float]:
        return self.float64 if np.asarray(want).dtype == np.float64 else self.other


def verify(
    model: torch.nn.Module,
    args: Any,
    *,
    onnx_model: Any = None,
    route: str = "custom",
    rtol: float | None = None,
    atol: float | None = None,
    opset: int | None = None,
    dynamo: bool = True,
    dynamic_shapes: Any = None,
    dynamic_batch: bool = True,
    batch_sizes: Sequence[int] | None = None,
    draws: int = 3,
    inputs: Any = None,
    levels: Sequence[str] | None = None,
    layers: bool = True,
    session_factory: SessionFactory | None = None,
    seed: int = 0,
) -> VerificationReport:
    """Verifies that ``model`` computes the same numbers in PyTorch and ONNX Runtime.

    ``args`` are the example inputs (a tuple, or one tensor). ``onnx_model``
    (a path, bytes or ``ModelProto``) is verified as given; without it the
    model is exported by ``route`` (``"custom"`` or ``"standard"``) with a
    dynamic batch dimension (``dynamic_batch=False`` or ``dynamic_shapes``
    to choose otherwise). A given model's ``opbridge.route`` metadata, when
    present, decides which route's structure rules apply.

    Sweeps: every ONNX Runtime optimization level (``levels``, default all
    the runtime has), ``batch_sizes`` (default 1, the export batch and a
    large one; only for a dynamic batch dimension), and ``draws`` input sets
    at the export batch: the example first, then random ones drawn like it,
    or instead the caller's ``inputs`` (see :func:`load_inputs`).

    ``rtol`` and ``atol`` apply to every tensor compared when given; by
    default they follow the PyTorch tensor's dtype: 1e-7 for float64
    (``DEFAULT_TOLERANCE_FLOAT64``), 1e-5 for the others.

    ``session_factory(model_bytes, level)`` makes the ONNX Runtime sessions
    (default :func:`default_session_factory`). ``layers=False`` skips the
    layer-by-layer comparison.
    """
    if route not in ROUTES:
        raise ValueError(f"opbridge.verify: route must be one of {ROUTES}, got {route!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (isinstance(value, int | float) and value >= 0):
            raise ValueError(
                f"opbridge.verify: {name} must be a number >= 0 (or None for the default by "
                f"dtype), got {value!r}"
            )
    tolerance = _Tolerance(rtol, atol)
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple):
        raise TypeError(
            f"opbridge.verify: args must be a tuple of example inputs, got {type(args).__name__}"
        )
    all_levels = available_levels()
    levels = list(levels) if levels is not None else all_levels
    unknown = [level for level in levels if level not in all_levels]
    if unknown:
        raise ValueError(
            f"opbridge.verify: unknown optimization level(s) {unknown}; expected some of "
            f"{all_levels}"
        )
    # BASE_LEVEL is the reference for the others; DEFAULT_LEVEL is reported as the final outputs.
    levels = sorted(set(levels) | {BASE_LEVEL}, key=all_levels.index)
    main_level = DEFAULT_LEVEL if DEFAULT_LEVEL in levels else levels[-1]
    factory = session_factory or default_session_factory

    if onnx_model is not None:
        proto, source = _load_model(onnx_model)
        metadata = {p.key: p.value for p in proto.metadata_props}
        route = metadata.get(METADATA_ROUTE_KEY, route)
    else:
        proto, source = _export(model, args, route, opset, dynamo, dynamic_shapes, dynamic_batch)

    with torch.no_grad():
        example_outputs = _leaves(model(*args))
    example_inputs = _leaves(args)
    report = VerificationReport(
        passed=False,
        route=route,
        rtol=tolerance.other[0],
        atol=tolerance.other[1],
        model_source=source,
        rtol_float64=tolerance.float64[0],
        atol_float64=tolerance.float64[1],
        onnx_model=proto,
    )
    report.structure = _structure_checks(proto, route, model, example_inputs, example_outputs)
    report.inputs = [_io_info(v) for v in _graph_inputs(proto)]
    report.outputs_info = [_io_info(v) for v in proto.graph.output]
    report.levels = levels

    cases = _cases(report, proto, args, batch_sizes, draws, inputs, seed)
    sessions, instrumented = _sessions(report, proto, model, args, levels, layers, factory)
    _run(report, model, cases, sessions, instrumented, factory, levels, main_level, tolerance)
    report.passed = not report.failures()
    return report


def _cases(report, proto, args, batch_sizes, draws, inputs, seed) -> list[_Case]:
    leaves = _leaves(args)
    export_batch = leaves[0].shape[0] if leaves and leaves[0].dim() > 0 else None
    graph_inputs = _graph_inputs(proto)
    batched = [bool(_dims(info)) and not isinstance(_dims(info)[0], int) for info in graph_inputs]
    generator = torch.Generator().manual_seed(seed)
    cases = [_Case("example", "draw", export_batch, args)]
    if inputs is not None:
        names = [info.name for info in graph_inputs]
        for label, user_args in load_inputs(inputs, names, args):
            first = _leaves(user_args)
            cases.append(_Case(label, "file", first[0].shape[0] if first else None, user_args))
    else:
        for index in range(1, max(draws, 1)):
            cases.append(
                _Case(f"draw {index}", "draw", export_batch, _redraw(args, generator, None, []))
            )

    if export_batch is None:
        report.batch_sweep = "not applicable: no input tensor has a batch dimension"
        return cases
    if not batched or not batched[0]:
        report.batch_sweep = "not applicable: the model's first input has a static batch dimension"
        return cases
    if batch_sizes is None:
        batch_sizes = [1, export_batch, max(LARGE_BATCH_MIN, 4 * export_batch)]
    sizes = sorted(dict.fromkeys(int(b) for b in batch_sizes))
    for size in sizes:
        if size == export_batch:
            continue
        cases.append(_Case(f"batch {size}", "batch", size, _redraw(args, generator, size, batched)))
    report.batch_sweep = "ran: " + ", ".join(str(s) for s in sizes)
    return cases


@dataclass
class _Instrumented:
    """The model with module outputs exposed, and what maps them."""

    model_bytes: bytes
    sessions: dict[str, Any]  # level -> session
    order: list[str]  # modules in the order they finished in PyTorch
    mapping: dict[str, list[str]]  # module -> ONNX values
    exposed: set[str]  # values the instrumented model outputs


def _sessions(report, proto, model, args, levels, layers, factory):
    """Sessions for the model at every level, and the instrumented model
    (module outputs exposed) at BASE_LEVEL when layer-by-layer applies."""
    import onnx

    sessions = {}
    model_bytes = proto.SerializeToString()
    for level in levels:
        try:
            sessions[level] = factory(model_bytes, level)
        except Exception as error:
            report.errors.append(
                f"ONNX Runtime could not load the model at {level}: {_one_line(error)}"
            )
    instrumented = None
    if not layers:
        report.layer_mapping = "not run (layers=False)"
        return sessions, instrumented
    mapping = map_modules(proto)
    if mapping is None:
        report.layer_mapping = (
            "unavailable: the model carries no exporter scope metadata "
            f"({_SCOPES_KEY}); export with the dynamo exporter to compare layer by layer"
        )
        return sessions, instrumented
    recorder = _Recorder(model)
    try:
        with torch.no_grad():
            model(*args)
    finally:
        recorder.close()
    order = list(recorder.outputs)
    torch_types = {}
    for module in order:
        for name, tensor in zip(mapping.get(module, []), recorder.outputs[module], strict=False):
            np_dtype = _to_numpy(tensor[:0] if tensor.dim() else tensor).dtype
            torch_types[name] = onnx.helper.np_dtype_to_tensor_dtype(np_dtype)
    wanted = [name for module in order for name in mapping.get(module, [])]
    instrumented_proto, exposed = _instrument(proto, wanted, torch_types)
    try:
        session = factory(instrumented_proto.SerializeToString(), BASE_LEVEL)
    except Exception as error:
        report.layer_mapping = (
            f"unavailable: ONNX Runtime could not load the model with module outputs exposed "
            f"({_one_line(error)})"
        )
        return sessions, instrumented
    mapped = [m for m in order if mapping.get(m) and set(mapping[m]) <= exposed]
    report.layer_mapping = (
        f"available: {len(mapped)} of {len(order)} modules mapped to ONNX values "
        f"(the last node in each module's scope)"
    )
    instrumented = _Instrumented(
        instrumented_proto.SerializeToString(), {BASE_LEVEL: session}, order, mapping, exposed
    )
    return sessions, instrumented


def _run_session(session, case: _Case) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    tensors = _leaves(case.args)
    if len(names) != len(tensors):
        raise ValueError(f"the session has {len(names)} inputs, the case {len(tensors)} tensors")
    feed = {name: _to_numpy(t) for name, t in zip(names, tensors, strict=True)}
    output_names = [o.name for o in session.get_outputs()]
    return dict(zip(output_names, session.run(None, feed), strict=True))


def _run(report, model, cases, sessions, instrumented, factory, levels, main_level, tolerance):
    layer_results = _layer_results(instrumented) if instrumented is not None else {}
    for case in cases:
        recorder = _Recorder(model) if instrumented is not None else None
        try:
            with torch.no_grad():
                expected = [_to_numpy(t) for t in _leaves(model(*case.args))]
        finally:
            if recorder is not None:
                recorder.close()
        _run_levels(report, case, expected, sessions, levels, main_level, tolerance)
        if recorder is not None:
            _compare_layers(
                report, instrumented, BASE_LEVEL, case, recorder, layer_results, tolerance
            )

    # Where a level changes the results, compare layer by layer at that level
    # too (exposing module outputs may keep some fusions from happening).
    if instrumented is not None and layer_results:
        for level in report.fusion_problems:
            try:
                instrumented.sessions[level] = factory(instrumented.model_bytes, level)
            except Exception as error:
                report.errors.append(
                    f"layer by layer at {level}: ONNX Runtime could not load the model: "
                    f"{_one_line(error)}"
                )
                continue
            for case in cases:
                recorder = _Recorder(model)
                try:
                    with torch.no_grad():
                        model(*case.args)
                finally:
                    recorder.close()
                _compare_layers(
                    report, instrumented, level, case, recorder, layer_results, tolerance
                )

    report.layers = list(layer_results.values())
    failing = [r for r in report.layers if r.status == FAIL]
    report.first_divergence = failing[0].module if failing else None


def _layer_results(instrumented: _Instrumented) -> dict[str, LayerResult]:
    results = {}
    for module in instrumented.order:
        values = instrumented.mapping.get(module, [])
        if not values:
            detail = "no ONNX node carries this module's scope"
            results[module] = LayerResult(module, [], NOT_APPLICABLE, detail=detail)
        elif not set(values) <= instrumented.exposed:
            detail = "the ONNX value's type is unknown; it cannot be exposed"
            results[module] = LayerResult(module, values, NOT_APPLICABLE, detail=detail)
        else:
            results[module] = LayerResult(module, values, PASS)
    return results


def _run_levels(report, case, expected, sessions, levels, main_level, tolerance) -> None:
    """Runs ``case`` at every level; compares with PyTorch and with BASE_LEVEL."""
    base_outputs = None
    for level in levels:
        if level not in sessions:
            continue
        cell = Cell(case.label, case.batch, level, PASS, 0.0, 0.0)
        report.cells.append(cell)
        try:
            got = list(_run_session(sessions[level], case).values())
        except Exception as error:
            cell.status, cell.error = FAIL, _one_line(error)
            cell.max_abs_err = cell.max_rel_err = float("inf")
            continue
        names = [o.name for o in sessions[level].get_outputs()]
        comparisons = [
            compare(name, g, e, *tolerance.of(e))
            for name, g, e in zip(names, got, expected, strict=False)
        ]
        if len(got) != len(expected):
            cell.error = f"{len(got)} outputs in ONNX Runtime, {len(expected)} in PyTorch"
        cell.status = PASS if all(c.passed for c in comparisons) and not cell.error else FAIL
        cell.max_abs_err = max((c.max_abs_err for c in comparisons), default=0.0)
        cell.max_rel_err = max((c.max_rel_err for c in comparisons), default=0.0)
        if case.label == "example" and level == main_level:
            report.outputs = comparisons
        if level == BASE_LEVEL:
            base_outputs = got
        elif base_outputs is not None and len(base_outputs) == len(got):
            against_base = [
                compare(n, g, b, *tolerance.of(b))
                for n, g, b in zip(names, got, base_outputs, strict=True)
            ]
            cell.max_abs_diff_vs_base = max((c.max_abs_err for c in against_base), default=0.0)
            # Nothing compared (NaN everywhere at both levels) is the final
            # outputs' failure, not a difference between levels.
            differs = [c for c in against_base if not c.passed and c.compared != 0]
            if differs and level not in report.fusion_problems:
                report.fusion_problems.append(level)


def _compare_layers(report, instrumented, level, case, recorder, layer_results, tolerance):
    try:
        values = _run_session(instrumented.sessions[level], case)
    except Exception as error:
        report.errors.append(
            f"layer by layer, {case.label} at {level}: ONNX Runtime failed: {_one_line(error)}"
        )
        return
    for module, result in layer_results.items():
        if result.status == NOT_APPLICABLE:
            continue
        tensors = recorder.outputs.get(module, [])
        names = instrumented.mapping[module]
        if len(tensors) != len(names):
            result.status = NOT_APPLICABLE
            result.detail = (
                f"{len(tensors)} tensors in PyTorch, {len(names)} outputs of the last ONNX node"
            )
            continue
        for name, tensor in zip(names, tensors, strict=True):
            want = _to_numpy(tensor)
            comparison = compare(name, values[name], want, *tolerance.of(want))
            if _worse(result.worst, comparison):
                result.worst, result.case, result.level = comparison, case.label, level
            if not comparison.passed:
                result.status = FAIL


# ------------------------------------------------------------------ formatting


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.2e}"


def _describe(c: Comparison | None) -> str:
    if c is None:
        return "-"
    if c.detail:
        return c.detail
    return (
        f"max abs err {_fmt(c.max_abs_err)}, max rel err {_fmt(c.max_rel_err)}, "
        f"cosine {c.cosine:.6f}, {c.mismatched} elements out of tolerance"
    )


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    lines = [line, "  ".join("-" * w for w in widths).rstrip()]
    for row in rows:
        cells = zip(row, widths, strict=True)
        lines.append("  ".join(str(x).ljust(w) for x, w in cells).rstrip())
    return lines


def _mark(status: str) -> str:
    return {PASS: "ok", FAIL: "FAIL", WARN: "warn", NOT_APPLICABLE: "n/a"}[status]


def _format_report(report: VerificationReport) -> list[str]:
    verdict = "PASS" if report.passed else "FAIL"
    tolerance = f"rtol {report.rtol:g}, atol {report.atol:g}"
    if (report.rtol_float64, report.atol_float64) != (report.rtol, report.atol):
        tolerance += f" (float64: {report.rtol_float64:g}, {report.atol_float64:g})"
    lines = [
        f"opbridge verify: {verdict}  (route {report.route}, {tolerance}; "
        f"model {report.model_source})",
        "",
        "Structure",
    ]
    lines += _table(
        ["check", "result", "detail"],
        [[c.name, _mark(c.status), c.detail] for c in report.structure],
    )

    lines += ["", f"Final outputs (example inputs, {DEFAULT_LEVEL}) vs PyTorch"]
    if report.outputs:
        rows = []
        for c in report.outputs:
            t, o = c.torch, c.ort
            rows.append(
                [
                    c.name,
                    _shape_text(c.shape),
                    _mark(PASS if c.passed else FAIL),
                    _fmt(c.max_abs_err),
                    _fmt(c.max_rel_err),
                    f"{c.cosine:.6f}",
                    _range(t),
                    _range(o),
                ]
            )
        lines += _table(
            [
                "output",
                "shape",
                "result",
                "max abs",
                "max rel",
                "cosine",
                "torch min/max/mean/var",
                "ORT min/max/mean/var",
            ],
            rows,
        )
    else:
        lines.append("  (not run)")

    lines += ["", "Sweeps: max abs error vs PyTorch, every case at every optimization level"]
    cases = list(dict.fromkeys((c.case, c.batch) for c in report.cells))
    by_key = {(c.case, c.level): c for c in report.cells}
    rows = []
    for case, batch in cases:
        row = [case, "-" if batch is None else str(batch)]
        for level in report.levels:
            cell = by_key.get((case, level))
            if cell is None:
                row.append("-")
            elif cell.error and not math.isfinite(cell.max_abs_err):
                row.append("ERROR")
            else:
                row.append(_fmt(cell.max_abs_err) + ("" if cell.status == PASS else " FAIL"))
        rows.append(row)
    lines += _table(["case", "batch", *report.levels], rows)
    lines.append(f"batch sweep: {report.batch_sweep}")
    if report.fusion_problems:
        for level in report.fusion_problems:
            worst = max(
                (c.max_abs_diff_vs_base or 0.0 for c in report.cells if c.level == level),
                default=0.0,
            )
            lines.append(
                f"FUSION PROBLEM at {level} ({LEVEL_ENUMS[level]}): results differ from "
                f"{BASE_LEVEL} by up to {_fmt(worst)}"
            )
    else:
        lines.append(f"optimization levels: consistent with {BASE_LEVEL}")

    lines += ["", f"Layer by layer: {report.layer_mapping}"]
    if report.layers:
        rows = []
        for r in report.layers:
            c = r.worst
            marker = "<- first divergence" if r.module == report.first_divergence else ""
            rows.append(
                [
                    r.module,
                    ",".join(r.onnx_values) or "-",
                    _mark(r.status),
                    _fmt(c.max_abs_err) if c else "-",
                    _fmt(c.max_rel_err) if c else "-",
                    f"{c.cosine:.6f}" if c else "-",
                    r.case if c else r.detail,
                    marker,
                ]
            )
        lines += _table(
            ["module", "onnx value", "result", "max abs", "max rel", "cosine", "worst case", ""],
            rows,
        )
    if report.first_divergence:
        layer = report.first_divergence_layer
        lines.append(
            f"first divergence: {report.first_divergence} ({layer.case}, {layer.level}): "
            f"{_describe(layer.worst)}"
        )
    failures = report.failures()
    lines += ["", f"Result: {verdict}" + (f" ({len(failures)} failures)" if failures else "")]
    lines += [f"  - {line}" for line in failures]
    return lines


def _range(s: Stats | None) -> str:
    if s is None:
        return "-"
    return f"{s.min:.3g}/{s.max:.3g}/{s.mean:.3g}/{s.var:.3g}"


# ------------------------------------------------------------------ plot


def _plot(report: VerificationReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Log axes cannot show an exact zero: those sit on the floor.
    floor, ratio_floor = 1e-10, 1e-4
    compared = [r for r in report.layers if r.worst is not None]
    names = [r.module for r in compared] + [f"output: {c.name}" for c in report.outputs]
    results = [r.worst for r in compared] + list(report.outputs)
    passed = [r.status == PASS for r in compared] + [c.passed for c in report.outputs]

    def clip(value: float, low: float) -> float:
        return max(value, low) if math.isfinite(value) else 1e6

    fig, (ax_err, ax_ratio) = plt.subplots(
        2, 1, figsize=(max(8, 0.45 * len(names) + 3), 8), sharex=True
    )
    x = list(range(len(names)))
    colors = ["tab:green" if ok else "tab:red" for ok in passed]
    errors = [clip(c.max_abs_err, floor) for c in results]
    ax_err.plot(x, errors, "-", color="tab:blue", zorder=1)
    ax_err.scatter(x, errors, c=colors, zorder=2, label="max abs err (red: fails)")
    ax_err.axhline(report.atol, color="gray", linestyle=":", label=f"atol {report.atol:g}")
    ax_err.set_yscale("log")
    ax_err.set_ylabel("max abs error vs PyTorch")
    ax_err.legend(loc="best", fontsize=8)
    ratios = [clip(c.tolerance_ratio, ratio_floor) for c in results]
    ax_ratio.bar(x, ratios, color=colors)
    ax_ratio.axhline(1.0, color="black", linestyle="--", label="tolerance: atol + rtol*|torch|")
    ax_ratio.set_yscale("log")
    ax_ratio.set_ylim(bottom=ratio_floor)
    ax_ratio.set_ylabel("max error / tolerance")
    ax_ratio.legend(loc="best", fontsize=8)
    if report.first_divergence in names:
        at = names.index(report.first_divergence)
        for ax in (ax_err, ax_ratio):
            ax.axvline(at, color="tab:red", linewidth=2, alpha=0.5)
        ax_err.annotate(
            f"first divergence: {report.first_divergence}",
            (at, errors[at]),
            textcoords="offset points",
            xytext=(8, -14),
            color="tab:red",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
    ax_ratio.set_xticks(x)
    ax_ratio.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    verdict = "PASS" if report.passed else "FAIL"
    title = f"opbridge verify ({report.route} route): {verdict}"
    if not compared:
        title += f" - layer by layer {report.layer_mapping.split(':')[0]}"
    ax_err.set_title(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
