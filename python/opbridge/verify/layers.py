"""Layer by layer: each named submodule's output in PyTorch (a forward hook)
against the ONNX value the exporter produced for it (the output of the last
node in the module's scope, exposed as an extra graph output); and in the
same runs, each call of a library operator against its node's value
(:mod:`opbridge.verify.operators`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from opbridge.verify.comparison import Tolerance, compare, shapes_differ, worse
from opbridge.verify.operators import CallLog, OperatorCheck
from opbridge.verify.report import FAIL, NOT_APPLICABLE, PASS, LayerResult, one_line
from opbridge.verify.sweeps import leaves, to_numpy

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_NAMESPACE_KEY = "namespace"


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


def _node_scopes(node) -> list[str] | None:
    """The module paths a node was exported under, outermost first (without
    the root), from the dynamo exporter's metadata; None without it."""
    props = {p.key: p.value for p in node.metadata_props}
    raw = props.get(SCOPES_KEY)
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


class Recorder:
    """Forward hooks on every named submodule; the latest output of each, in
    the order the modules finished (a module called twice keeps its last call).
    With ``calls``, also every call of a library operator (``self.calls``, a
    :class:`~opbridge.verify.operators.CallLog`). A context manager: the hooks
    come off on exit."""

    def __init__(self, model: torch.nn.Module, calls: bool = False):
        self.outputs: dict[str, list[torch.Tensor]] = {}
        self.handles = [
            module.register_forward_hook(self._hook(name))
            for name, module in model.named_modules()
            if name
        ]
        self.calls = CallLog(model) if calls else None

    def _hook(self, name: str):
        def hook(_module, _args, output):
            self.outputs.pop(name, None)
            self.outputs[name] = [t.detach().clone() for t in leaves(output)]

        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __enter__(self) -> Recorder:
        if self.calls is not None:
            self.calls.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.calls is not None:
            self.calls.__exit__(*exc)
        self.close()


def record(model: torch.nn.Module, args: tuple, calls: bool = False) -> tuple[Any, Recorder]:
    """Runs ``model`` on ``args`` with every module's output recorded (and with
    ``calls``, every library operator call's); returns the model's output and
    the recorder."""
    with Recorder(model, calls) as recorder, torch.no_grad():
        output = model(*args)
    return output, recorder


@dataclass
class LayerCheck:
    """The model with module outputs (and library operator calls' outputs)
    exposed, its sessions by level, what maps modules to ONNX values, the
    result of each module so far, and the operator-by-operator check (None
    without a call of a library operator)."""

    model_bytes: bytes
    sessions: dict[str, Any]  # level -> session
    order: list[str]  # modules in the order they finished in PyTorch
    mapping: dict[str, list[str]]  # module -> ONNX values
    exposed: set[str]  # values the instrumented model outputs
    results: dict[str, LayerResult]
    operators: OperatorCheck | None = None

    @classmethod
    def prepare(
        cls,
        proto,
        model: torch.nn.Module,
        args: tuple,
        factory: Callable[[bytes, str], Any],
        base_level: str,
        route: str = "",
        runtime_label: str = "ONNX Runtime",
    ) -> tuple[LayerCheck | None, str, str, OperatorCheck | None]:
        """The check for ``proto`` (None where neither layer by layer nor
        operator by operator can run), the report's lines saying what is
        mapped, or why nothing is (for modules, and for operator calls), and
        the operator calls' check (None without a call; its results fill in
        as the check runs)."""
        import onnx

        mapping = map_modules(proto)
        layer_line = None
        if mapping is None:
            layer_line = (
                "unavailable: the model carries no exporter scope metadata "
                f"({SCOPES_KEY}); export with the dynamo exporter to compare layer by layer"
            )
        _, recorder = record(model, args, calls=True)
        found, operator_line = OperatorCheck.prepare(proto, recorder.calls, route)
        # The calls' results are the report's even where none can be compared.
        operators = found if found is not None and found.wanted() else None
        if mapping is None and operators is None:
            return None, layer_line, operator_line, found
        order = list(recorder.outputs) if mapping is not None else []
        mapping = mapping or {}
        np_types = {}
        for module in order:
            for name, tensor in zip(
                mapping.get(module, []), recorder.outputs[module], strict=False
            ):
                np_types[name] = to_numpy(tensor[:0] if tensor.dim() else tensor).dtype
        wanted = [name for module in order for name in mapping.get(module, [])]
        if operators is not None:
            np_types.update(operators.torch_types(recorder.calls))
            wanted += operators.wanted()
        torch_types = {n: onnx.helper.np_dtype_to_tensor_dtype(t) for n, t in np_types.items()}
        instrumented, exposed = _instrument(proto, list(dict.fromkeys(wanted)), torch_types)
        model_bytes = instrumented.SerializeToString()
        try:
            session = factory(model_bytes, base_level)
        except Exception as error:
            why = (
                f"unavailable: {runtime_label} could not load the model with module outputs "
                f"exposed ({one_line(error)})"
            )
            if operators is not None:
                for result in operators.results:
                    result.status, result.detail = (
                        NOT_APPLICABLE,
                        "the instrumented model did not load",
                    )
                operator_line = why
            return None, layer_line or why, operator_line, found
        check = cls(model_bytes, {base_level: session}, order, mapping, exposed, {}, operators)
        check.results = {module: check._initial_result(module) for module in order}
        if operators is not None:
            operators.drop_unexposed(exposed)
            operator_line = operators.summary()
        if layer_line is None:
            mapped = [m for m in order if mapping.get(m) and set(mapping[m]) <= exposed]
            layer_line = (
                f"available: {len(mapped)} of {len(order)} modules mapped to ONNX values "
                f"(the last node in each module's scope)"
            )
        return check, layer_line, operator_line, found

    def _initial_result(self, module: str) -> LayerResult:
        values = self.mapping.get(module, [])
        if not values:
            detail = "no ONNX node carries this module's scope"
            return LayerResult(module, [], NOT_APPLICABLE, detail=detail)
        if not set(values) <= self.exposed:
            detail = "the ONNX value's type is unknown; it cannot be exposed"
            return LayerResult(module, values, NOT_APPLICABLE, detail=detail)
        return LayerResult(module, values, PASS)

    def compare(
        self,
        values: dict[str, Any],
        recorder: Recorder,
        tolerance: Tolerance,
        case: str,
        level: str,
    ) -> None:
        """Compares the instrumented model's ``values`` (one run of ``case`` at
        ``level``) with the module outputs (and operator calls' outputs)
        ``recorder`` holds for that case."""
        done = {}  # ONNX value -> (PyTorch tensor, comparison), for the calls' rows
        for module, result in self.results.items():
            if result.status == NOT_APPLICABLE:
                continue
            tensors = recorder.outputs.get(module, [])
            names = self.mapping[module]
            if len(tensors) != len(names):
                result.status = NOT_APPLICABLE
                result.detail = (
                    f"{len(tensors)} tensors in PyTorch, {len(names)} outputs of the last ONNX node"
                )
                continue
            shapes = [
                (np.shape(values[n]), tuple(t.shape)) for n, t in zip(names, tensors, strict=True)
            ]
            differ = shapes_differ(shapes, "ONNX Runtime")
            if differ:
                # Not this module's tensors (e.g. a model output that the
                # export dropped): the final outputs are compared elsewhere.
                result.status = NOT_APPLICABLE
                result.detail = differ
                continue
            for name, tensor in zip(names, tensors, strict=True):
                want = to_numpy(tensor)
                comparison = compare(name, values[name], want, *tolerance.of(want))
                done[name] = (tensor, comparison)
                if worse(result.worst, comparison):
                    result.worst, result.case, result.level = comparison, case, level
                if not comparison.passed:
                    result.status = FAIL
        if self.operators is not None and recorder.calls is not None:
            self.operators.compare(values, recorder.calls, tolerance, case, level, done)

    @property
    def first_divergence(self) -> str | None:
        """The first module, in execution order, whose output diverges."""
        return next((r.module for r in self.results.values() if r.status == FAIL), None)


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
    """A copy of ``model`` that also outputs ``values``, and the names it outputs."""
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
