"""Operator by operator: each call the model makes of a library operator
(``torch.ops.<namespace>.<op>`` of any loaded library, called functionally
or by a module) in PyTorch against the ONNX value of that call's node.

PyTorch's side is recorded while the model runs (:class:`CallLog`: the
output of every call, and the module whose ``forward`` made it). The ONNX
side is found in the exported graph, the k-th call of an operator being the
k-th call of it in the graph:

* with the dynamo exporter's node metadata (``pkg.torch.onnx.fx_node``), on
  every route: the nodes the exporter made for one call carry that call's FX
  node, whether the call became one library node (custom and function
  routes), a runtime's fused operator (ort route) or a chain of standard
  operators (standard route); the call's outputs are the values of the nodes
  the exporter names after the FX node (``node_<fx name>``, or
  ``node_<fx name>__<k>`` for the node whose last output is the call's
  output k), else those of its last node (compared only when PyTorch has as
  many outputs);
* without that metadata (the legacy exporter, a model stripped of it): the
  library's nodes of the operator's domain and type, in graph order; an
  operator that became standard operators then cannot be found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from opbridge.export import exportable
from opbridge.ops.calls import CallRecorder
from opbridge.verify.comparison import Comparison, Tolerance, compare, shapes_differ, worse
from opbridge.verify.report import FAIL, NOT_APPLICABLE, PASS, OperatorResult
from opbridge.verify.sweeps import leaves, to_numpy

FX_NODE_KEY = "pkg.torch.onnx.fx_node"
_FX_NODE = re.compile(
    r"^%(?P<name>[\w.]+) : .*call_function\[target=torch\.ops\.(?P<namespace>\w+)\.(?P<op>\w+)"
)

# How the calls were found in the graph (OperatorCheck.how).
BY_METADATA = "the exporter's node metadata"
BY_LIBRARY_NODES = "the library's nodes, in call order"


@dataclass
class RecordedCall:
    """One call of a library operator in PyTorch."""

    op: str  # "<namespace>::<name>"
    index: int  # 1 for the op's first call in the run, 2 for the next, ...
    module: str  # the module whose forward made the call ("" for the model's own)
    outputs: list[torch.Tensor]


class CallLog:
    """Every call of a loaded library's operator while ``model`` runs, in
    order, with its outputs and the calling module (forward pre-hooks and
    hooks on every named submodule keep the stack of modules running). A
    context manager: the recording stops and the hooks come off on exit."""

    def __init__(self, model: torch.nn.Module):
        self.calls: list[RecordedCall] = []
        self._stack: list[str] = []
        self._counts: dict[str, int] = {}
        self._handles = []
        for name, module in model.named_modules():
            if not name:
                continue
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave, always_call=True))
        self._mode = CallRecorder(self._on_call)

    def _enter(self, name: str):
        def hook(_module, _args):
            self._stack.append(name)

        return hook

    def _leave(self, _module, _args, _output):
        if self._stack:
            self._stack.pop()

    def _on_call(self, op: str, _args, _kwargs, output) -> None:
        index = self._counts[op] = self._counts.get(op, 0) + 1
        module = self._stack[-1] if self._stack else ""
        outputs = [t.detach().clone() for t in leaves(output)]
        self.calls.append(RecordedCall(op, index, module, outputs))

    def by_op(self) -> dict[str, list[RecordedCall]]:
        found: dict[str, list[RecordedCall]] = {}
        for call in self.calls:
            found.setdefault(call.op, []).append(call)
        return found

    def __enter__(self) -> CallLog:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._handles = []


@dataclass
class CallNode:
    """One call of an operator in the ONNX graph: its outputs, as (output
    index, value name); ``exact`` when the indices are known, False when they
    are the outputs of the call's last node (compared only when PyTorch has as
    many)."""

    values: list[tuple[int, str]]
    exact: bool = True


def map_calls(model) -> tuple[dict[str, list[CallNode]], str | None]:
    """Operator ("<namespace>::<name>") -> its calls in the graph, in order;
    and how they were found (``BY_METADATA``, ``BY_LIBRARY_NODES``; None when
    the graph has neither metadata nor a library node)."""
    namespaces = {lib.torch_namespace for lib in exportable()}
    groups: dict[str, tuple[str, list]] = {}  # FX node name -> (op, its nodes)
    seen_metadata = False
    for node in model.graph.node:
        raw = next((p.value for p in node.metadata_props if p.key == FX_NODE_KEY), None)
        if raw is None:
            continue
        seen_metadata = True
        match = _FX_NODE.match(raw)
        if match is None or match["namespace"] not in namespaces:
            continue
        op = f"{match['namespace']}::{match['op']}"
        groups.setdefault(match["name"], (op, []))[1].append(node)
    if seen_metadata:
        found: dict[str, list[CallNode]] = {}
        for fx_name, (op, nodes) in groups.items():
            found.setdefault(op, []).append(_call_outputs(fx_name, nodes))
        return found, BY_METADATA
    by_type = {
        (lib.onnx_domain, spec["onnx_type"]): f"{lib.torch_namespace}::{name}"
        for lib in exportable()
        for name, spec in lib.specs().items()
    }
    found = {}
    for node in model.graph.node:
        op = by_type.get((node.domain, node.op_type))
        if op is not None:
            values = [(i, name) for i, name in enumerate(node.output) if name]
            found.setdefault(op, []).append(CallNode(values))
    return found, (BY_LIBRARY_NODES if found else None)


def _call_outputs(fx_name: str, nodes: list) -> CallNode:
    """The outputs of one call's nodes, by output index: those of the node the
    exporter names after the FX node, ``node_<fx name>`` (every output of the
    call); or of the nodes ``node_<fx name>__<k>``, whose last output is the
    call's output k (one node making outputs 0..k, as a library node does, or
    one node per output of a decomposition); else the last node's, indices
    unknown."""
    by_name = {node.name: node for node in nodes}
    whole = by_name.get(f"node_{fx_name}")
    if whole is not None:
        return CallNode([(i, name) for i, name in enumerate(whole.output) if name])
    parts = {}
    for node in nodes:
        match = re.fullmatch(rf"node_{re.escape(fx_name)}__(\d+)", node.name)
        if match is None:
            continue
        last = int(match[1])
        if len(node.output) == last + 1:  # outputs 0..k: a library node
            parts.update((i, name) for i, name in enumerate(node.output) if name)
        elif any(node.output):  # output k is its last; the others are not the call's
            parts[last] = [name for name in node.output if name][-1]
    if parts:
        return CallNode(sorted(parts.items()))
    last = nodes[-1]
    return CallNode([(i, name) for i, name in enumerate(last.output) if name], exact=False)


@dataclass
class OperatorCheck:
    """The calls of library operators, what maps each to ONNX values, and
    the result of each so far (in the order PyTorch made the calls)."""

    how: str | None
    nodes: dict[str, list[CallNode]]
    results: list[OperatorResult] = field(default_factory=list)

    @classmethod
    def prepare(cls, proto, log: CallLog, route: str) -> tuple[OperatorCheck | None, str]:
        """The check for the calls ``log`` holds (None without any call) and
        the report's line saying what is mapped, or why nothing is."""
        if not log.calls:
            return None, "no call of a library operator in the model"
        nodes, how = map_calls(proto)
        check = cls(how, nodes)
        by_op = log.by_op()
        for op, calls in by_op.items():
            found = nodes.get(op, [])
            for call in calls:
                result = OperatorResult(call.op, call.index, call.module, [], PASS)
                if len(found) != len(calls):
                    result.status = NOT_APPLICABLE
                    result.detail = _unmapped(op, len(calls), len(found), how, route)
                else:
                    node = found[call.index - 1]
                    result.onnx_values = [name for _, name in node.values]
                    if not node.exact and len(node.values) != len(call.outputs):
                        result.status = NOT_APPLICABLE
                        result.detail = (
                            f"{len(call.outputs)} outputs in PyTorch, {len(node.values)} of the "
                            "call's last ONNX node: they cannot be told apart"
                        )
                check.results.append(result)
        order = {(c.op, c.index): i for i, c in enumerate(log.calls)}
        check.results.sort(key=lambda r: order[(r.op, r.call)])
        return check, check.summary()

    def summary(self) -> str:
        """The report's line: how many calls are mapped, and how."""
        mapped = sum(r.status != NOT_APPLICABLE for r in self.results)
        line = f"{mapped} of {len(self.results)} calls mapped to ONNX values"
        if self.how is not None:
            line += f" ({self.how})"
        return ("available: " if mapped else "unavailable: ") + line

    def wanted(self) -> list[str]:
        """The ONNX values the comparisons need."""
        return [name for r in self.results if r.status != NOT_APPLICABLE for name in r.onnx_values]

    def torch_types(self, log: CallLog) -> dict[str, np.dtype]:
        """ONNX value -> the numpy dtype of PyTorch's tensor for it."""
        types = {}
        calls = {(c.op, c.index): c for c in log.calls}
        for result in self.results:
            call = calls.get((result.op, result.call))
            if call is None or result.status == NOT_APPLICABLE:
                continue
            for index, name in self._indexed(result):
                if index < len(call.outputs):
                    tensor = call.outputs[index]
                    types[name] = to_numpy(tensor[:0] if tensor.dim() else tensor).dtype
        return types

    def _indexed(self, result: OperatorResult) -> list[tuple[int, str]]:
        return self.nodes[result.op][result.call - 1].values

    def drop_unexposed(self, exposed: set[str]) -> None:
        """Marks the calls whose values the instrumented model cannot output."""
        for result in self.results:
            if result.status != NOT_APPLICABLE and not set(result.onnx_values) <= exposed:
                result.status = NOT_APPLICABLE
                result.detail = "the ONNX value's type is unknown; it cannot be exposed"

    def compare(
        self,
        values: dict[str, np.ndarray],
        log: CallLog,
        tolerance: Tolerance,
        case: str,
        level: str,
        done: dict[str, tuple[torch.Tensor, Comparison]] | None = None,
    ) -> None:
        """Compares the instrumented model's ``values`` (one run of ``case``
        at ``level``) with the call outputs ``log`` holds for that case.
        ``done`` holds comparisons already made in this run (a module whose
        output is a call's): an ONNX value compared with an equal tensor is
        not compared again."""
        done = done or {}
        calls = {(c.op, c.index): c for c in log.calls}
        for result in self.results:
            if result.status == NOT_APPLICABLE:
                continue
            call = calls.get((result.op, result.call))
            if call is None:
                result.status = NOT_APPLICABLE
                result.detail = f"PyTorch made no call {result.call} of {result.op} on {case}"
                continue
            pairs = []
            for index, name in self._indexed(result):
                if index >= len(call.outputs):
                    continue
                pairs.append((name, call.outputs[index]))
            shapes = [(np.shape(values[n]), tuple(t.shape)) for n, t in pairs]
            differ = shapes_differ(shapes, "the runtime")
            if not pairs or differ:
                result.status = NOT_APPLICABLE
                result.detail = differ or "shapes differ: "
                continue
            for name, tensor in pairs:
                comparison = _already(done.get(name), tensor)
                if comparison is None:
                    want = to_numpy(tensor)
                    comparison = compare(name, values[name], want, *tolerance.of(want))
                if worse(result.worst, comparison):
                    result.worst, result.case, result.level = comparison, case, level
                if not comparison.passed:
                    result.status = FAIL

    @property
    def first_divergence(self) -> OperatorResult | None:
        """The first call, in the order PyTorch made them, whose output diverges."""
        return next((r for r in self.results if r.status == FAIL), None)


def _already(found: tuple[torch.Tensor, Comparison] | None, tensor: torch.Tensor):
    """The comparison ``found`` made, when it compared the same ONNX value with
    a tensor equal to ``tensor``; else None."""
    if found is None:
        return None
    other, comparison = found
    same = other.dtype == tensor.dtype and other.shape == tensor.shape
    return comparison if same and torch.equal(other, tensor) else None


def _unmapped(op: str, calls: int, nodes: int, how: str | None, route: str) -> str:
    if nodes == 0 and how != BY_METADATA:
        return (
            f"{op} became operators of no node of its own (route {route}), and the model "
            f"carries no exporter metadata ({FX_NODE_KEY}) to find them: export with the "
            "dynamo exporter to compare it"
        )
    return (
        f"{calls} calls of {op} in PyTorch, {nodes} in the ONNX graph: the calls cannot be "
        "matched one to one"
    )
