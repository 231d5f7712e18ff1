"""Simplifies an exported model (constant folding, shape inference, dead
and redundant nodes removed) with onnxsim, keeping every node of an operator
library's domain exactly as exported.

onnxsim folds only ai.onnx operators, so library nodes are never folded
away; it checks its result by running both models in ONNX Runtime with the
operator library the model needs registered (``custom_lib``). What it gives
back is then compared with the model it was given: every node outside the
ai.onnx domain (operator libraries', ``com.microsoft``'s) must be there
with the same domain, op type, attributes and number of inputs and outputs,
and every model-local function and custom-domain opset import unchanged.
When the simplifier fails, its check fails, or it changed such a node, the
model is kept as exported and the reason (naming the node) is given: a
:class:`SimplifyWarning`, or a :class:`SimplifyError` with ``strict=True``.
Never a silently different model.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opbridge._library import library_for_domain

__all__ = [
    "DEFAULT_SKIPPED_OPTIMIZERS",
    "METADATA_SIMPLIFIED_KEY",
    "SIMPLIFIER",
    "SimplifyError",
    "SimplifyReport",
    "SimplifyWarning",
    "changed_library_nodes",
    "simplify",
]

# The simplifier and the version requirements.txt pins.
SIMPLIFIER = "onnxsim"
SIMPLIFIER_VERSION = "0.8.1"
METADATA_SIMPLIFIED_KEY = "opbridge.simplified"
# onnxsim passes left out by default. The batched MatMul+Add -> Gemm fusion
# wraps each Gemm of a [batch, seq, dim] input in two Reshapes: one more
# node per linear layer and no faster in ONNX Runtime, which fuses
# MatMul+Add itself (measured: docs/guides/export-and-routes.md).
DEFAULT_SKIPPED_OPTIMIZERS = ("fuse_matmul_add_bias_into_gemm_batched",)
# Domains whose nodes the simplifier may rewrite, fold or remove.
_STANDARD_DOMAINS = frozenset({"", "ai.onnx"})


class SimplifyError(RuntimeError):
    """Simplification refused (``strict=True``): the reason, naming the node
    the simplifier changed where it changed one."""


class SimplifyWarning(UserWarning):
    """Simplification did not apply; the model was kept as exported."""


@dataclass(frozen=True)
class SimplifyReport:
    """What :func:`simplify` did.

    ``simplified`` is False when the model was kept as given (``reason``
    says why); ``library_nodes`` counts the nodes outside the ai.onnx
    domain, each kept as it was.
    """

    nodes_before: int
    nodes_after: int
    library_nodes: int
    seconds: float
    simplified: bool
    reason: str = ""
    simplifier: str = SIMPLIFIER

    def line(self) -> str:
        if not self.simplified:
            return f"not simplified ({self.reason}); kept the model as exported"
        count = self.library_nodes
        plural = "s" if count != 1 else ""
        kept = f", {count} custom-domain node{plural} kept as exported" if count else ""
        return (
            f"simplified with {self.simplifier}: {self.nodes_before} -> {self.nodes_after} "
            f"nodes{kept} ({self.seconds:.2f} s)"
        )


def _load(model: Any):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(os.fspath(model))


def _kept_nodes(model) -> list:
    return [node for node in model.graph.node if node.domain not in _STANDARD_DOMAINS]


def _signature(node) -> tuple:
    attributes = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))
    return (node.domain, node.op_type, attributes, len(node.input), len(node.output))


def _describe(node) -> str:
    if node.name:
        return f"node {node.name!r} ({node.domain}::{node.op_type})"
    return f"a {node.domain}::{node.op_type} node"


def _difference(before, after) -> str:
    if before.op_type != after.op_type or before.domain != after.domain:
        return f"became {after.domain}::{after.op_type}"
    old = {a.name: a for a in before.attribute}
    new = {a.name: a for a in after.attribute}
    changed = sorted(name for name in old.keys() & new.keys() if old[name] != new[name])
    parts = []
    if old.keys() - new.keys():
        parts.append(f"lost attribute(s) {sorted(old.keys() - new.keys())}")
    if new.keys() - old.keys():
        parts.append(f"gained attribute(s) {sorted(new.keys() - old.keys())}")
    if changed:
        parts.append(f"changed attribute(s) {changed}")
    if len(before.input) != len(after.input) or len(before.output) != len(after.output):
        parts.append(
            f"has {len(after.input)} inputs and {len(after.output)} outputs instead of "
            f"{len(before.input)} and {len(before.output)}"
        )
    return "; ".join(parts) or "changed"


def changed_library_nodes(before, after) -> list[str]:
    """One line per node outside the ai.onnx domain (and per model-local
    function or custom-domain opset import) of ``before`` that ``after``
    does not have unchanged, and per such node ``after`` adds; empty when
    all are intact."""
    left = Counter(_signature(node) for node in _kept_nodes(after))
    missing = []
    for node in _kept_nodes(before):
        if left[_signature(node)] > 0:
            left[_signature(node)] -= 1
        else:
            missing.append(node)
    by_name = {node.name: node for node in _kept_nodes(after) if node.name}
    problems = []
    for node in missing:
        twin = by_name.get(node.name)
        problems.append(
            f"{_describe(node)} {'was removed' if twin is None else _difference(node, twin)}"
        )
    missing_names = {node.name for node in missing}
    for node in _kept_nodes(after):
        if left[_signature(node)] > 0:
            left[_signature(node)] -= 1
            if not node.name or node.name not in missing_names:
                problems.append(f"{_describe(node)} was added")
    functions_after = {(f.domain, f.name): f for f in after.functions}
    for function in before.functions:
        key = (function.domain, function.name)
        if functions_after.get(key) != function:
            state = "was removed" if key not in functions_after else "was changed"
            problems.append(f"model-local function {key[0]}::{key[1]} {state}")
    used = {node.domain for node in _kept_nodes(before)}
    imports_after = {i.domain: i.version for i in after.opset_import}
    for imported in before.opset_import:
        if imported.domain in used and imports_after.get(imported.domain) != imported.version:
            problems.append(
                f"the import of domain {imported.domain!r} version {imported.version} became "
                f"{imports_after.get(imported.domain)}"
            )
    return problems


def _check_libraries(model) -> list[str]:
    """The ONNX Runtime libraries of the loaded operator libraries whose
    domains the model uses."""
    used = sorted({node.domain for node in _kept_nodes(model)})
    found = [library_for_domain(domain) for domain in used]
    return [str(library.adapter_path("ort")) for library in found if library is not None]


def _run_simplifier(model, check_runs: int, skipped: Sequence[str] | None):
    try:
        import onnxsim
    except ImportError as error:
        raise RuntimeError(
            f"{SIMPLIFIER} is not installed (pip install {SIMPLIFIER}=={SIMPLIFIER_VERSION})"
        ) from error
    # onnxsim's check registers one library: a model that needs two is
    # checked after simplification only (by the caller's verify).
    needed = _check_libraries(model)
    runs = check_runs if len(needed) <= 1 else 0
    # onnxsim prints its check's progress; the report says what matters.
    with contextlib.redirect_stdout(io.StringIO()):
        simplified, ok = onnxsim.simplify(
            copy.deepcopy(model),
            check_n=runs,
            custom_lib=needed[0] if len(needed) == 1 else None,
            skipped_optimizers=list(DEFAULT_SKIPPED_OPTIMIZERS if skipped is None else skipped),
        )
    if not ok:
        raise RuntimeError(
            f"{SIMPLIFIER}'s check found that the simplified model's outputs differ from the "
            "exported model's"
        )
    return simplified


def simplify(
    model: Any,
    *,
    check_runs: int = 1,
    skipped_optimizers: Sequence[str] | None = None,
    strict: bool = False,
) -> tuple[Any, SimplifyReport]:
    """Simplifies ``model`` (a ``ModelProto``, bytes or a path) with onnxsim.

    Returns ``(model, report)``: the simplified ``ModelProto`` (with
    metadata ``opbridge.simplified``), or, when the simplifier fails, its
    check of ``check_runs`` random inputs fails (run in ONNX Runtime with the
    model's operator library), or it changed a node outside the ai.onnx
    domain, the model as given, a :class:`SimplifyWarning` that names the
    reason (and the node), and ``report.simplified`` False. ``strict=True``
    raises a :class:`SimplifyError` instead.

    ``skipped_optimizers`` names onnxsim passes to leave out (None:
    :data:`DEFAULT_SKIPPED_OPTIMIZERS`; ``()`` runs all of onnxsim's default
    passes). The given model is not changed.
    """
    proto = _load(model)
    before = len(proto.graph.node)
    kept = len(_kept_nodes(proto))
    start = time.perf_counter()
    try:
        simplified = _run_simplifier(proto, check_runs, skipped_optimizers)
    except Exception as error:
        first = str(error).strip().splitlines()
        reason = f"{SIMPLIFIER} failed: {type(error).__name__}: {first[0] if first else ''}"
    else:
        problems = changed_library_nodes(proto, simplified)
        reason = (
            f"{SIMPLIFIER} changed a node it must keep: " + "; ".join(problems) if problems else ""
        )
    seconds = time.perf_counter() - start
    if reason:
        if strict:
            raise SimplifyError(f"opbridge.export.simplify: {reason}")
        warnings.warn(
            f"opbridge.export.simplify: {reason}; the model is kept as exported",
            SimplifyWarning,
            stacklevel=2,
        )
        return proto, SimplifyReport(before, before, kept, seconds, False, reason)
    entry = next((p for p in simplified.metadata_props if p.key == METADATA_SIMPLIFIED_KEY), None)
    if entry is None:
        entry = simplified.metadata_props.add()
        entry.key = METADATA_SIMPLIFIED_KEY
    entry.value = _simplifier_name()
    after = len(simplified.graph.node)
    return simplified, SimplifyReport(before, after, kept, seconds, True, "", entry.value)


def _simplifier_name() -> str:
    from importlib import metadata

    try:
        return f"{SIMPLIFIER} {metadata.version(SIMPLIFIER)}"
    except metadata.PackageNotFoundError:
        return SIMPLIFIER
