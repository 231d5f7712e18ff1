"""What a runtime is (:class:`Runtime`), apart from the registry of runtimes."""

from __future__ import annotations

import contextlib
import contextvars
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

WARMUP = 3
REPEATS = 15
# A wrong form whose known error (max abs, against PyTorch) is this or more
# is refused by a session, not only warned of: an error as large as the
# values of a unit-scale model, whose outputs then carry none of its numbers.
LARGE_ERROR = 1.0


@dataclass
class RuntimeCheck:
    """One check ``opbridge doctor`` reports for a runtime."""

    name: str
    ok: bool
    detail: str


class WrongFormWarning(UserWarning):
    """A session's model has a node of a form its runtime computes wrong in
    some use (:attr:`Runtime.wrong_forms`); the message names the node, says
    what is wrong and how to export the model without the form."""


class WrongFormError(RuntimeError):
    """A session refuses a model with a node of a form its runtime computes
    wrong by a large error (:attr:`WrongForm.large`); the message names the
    node, says what is wrong and how to export the model without the form,
    or to pass ``allow_wrong_forms=True`` to the session."""


class PrecisionWarning(UserWarning):
    """A session's model has inputs or outputs of a dtype its runtime
    computes in another (:attr:`Runtime.lowered_dtypes`: OpenVINO's CPU
    plugin computes float64 in float32); the message names them and says
    what the runtime does with them."""


@dataclass(frozen=True)
class WrongForm:
    """What a runtime computes wrong in one ONNX form: ``why`` (the uses it
    computes wrong), and ``max_abs_err``, the largest error against PyTorch
    known of it (float32; None when none was measured)."""

    why: str
    max_abs_err: float | None = None

    @property
    def large(self) -> bool:
        """Whether its known error is :data:`LARGE_ERROR` or more: a session
        refuses a model with it (``allow_wrong_forms=True`` to run it)."""
        return self.max_abs_err is not None and self.max_abs_err >= LARGE_ERROR

    def __str__(self) -> str:
        return self.why


@dataclass(frozen=True)
class WrongFormUse:
    """One node of a model in a form a runtime computes wrong: the ``form``
    (``"com.microsoft::RotaryEmbedding"``), the node's name (``""`` for a node
    without one), ``where`` it is (``"the graph"``, ``"a subgraph of node
    'loop'"``, ``"function opbridge::RmsNorm"``) and what is ``wrong``."""

    form: str
    node: str
    where: str
    wrong: WrongForm

    def label(self) -> str:
        """``node 'rotary_q' (com.microsoft::RotaryEmbedding, in the graph)``."""
        name = f"node {self.node!r}" if self.node else "a node without a name"
        return f"{name} ({self.form}, in {self.where})"


def form_of(domain: str, op_type: str) -> str:
    """A node's form as ``wrong_forms`` and ``avoid`` name it: the op type
    for ai.onnx, ``domain::op_type`` for any other domain."""
    return f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type


def wrong_form_uses(model: Any, wrong_forms: Mapping[str, WrongForm]) -> list[WrongFormUse]:
    """Every node of ``model`` (an ``onnx.ModelProto``) whose form is one of
    ``wrong_forms``, wherever it is: the graph, the subgraphs of If, Loop
    and Scan nodes (at any depth), and the bodies of the model's functions."""
    uses: list[WrongFormUse] = []

    def visit(nodes: Any, where: str) -> None:
        for node in nodes:
            form = form_of(node.domain, node.op_type)
            if form in wrong_forms:
                uses.append(WrongFormUse(form, node.name, where, wrong_forms[form]))
            inner = f"a subgraph of node {node.name!r}" if node.name else f"a subgraph of {form}"
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    visit(attribute.g.node, inner)
                for subgraph in attribute.graphs:
                    visit(subgraph.node, inner)

    if wrong_forms:
        visit(model.graph.node, "the graph")
        for function in model.functions:
            visit(function.node, f"function {form_of(function.domain, function.name)}")
    return uses


def _given(graph: Any) -> set[str]:
    """A graph's (or a function's) inputs and initializers."""
    names = {getattr(value, "name", value) for value in graph.input}
    return names | {tensor.name for tensor in getattr(graph, "initializer", ())}


def _outer_names(graph: Any) -> set[str]:
    """The names a (sub)graph's nodes read that the graph does not define:
    the values it takes from the scope around it."""
    defined = _given(graph)
    defined.update(name for node in graph.node for name in node.output)
    used: set[str] = set()
    for node in graph.node:
        used.update(name for name in node.input if name)
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                used.update(_outer_names(subgraph))
    return used - defined


def graph_cycle(graph: Any) -> list[Any] | None:
    """The nodes of a cycle in ``graph`` (an ``onnx.GraphProto`` or
    ``FunctionProto``), each
    needing an output of the next and the last one of the first; None when
    it has none (its subgraphs' cycles included). A node with subgraphs
    needs the outer values they read."""
    given = _given(graph)
    maker = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if name and name not in given:
                maker.setdefault(name, index)
    needs: list[list[int]] = []
    for node in graph.node:
        names = {name for name in node.input if name}
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                inner = graph_cycle(subgraph)
                if inner is not None:
                    return inner
                names.update(_outer_names(subgraph))
        needs.append(sorted(maker[name] for name in names if name in maker))
    # Depth-first, iteratively (a long chain must not reach the recursion limit).
    state = [0] * len(graph.node)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(graph.node)):
        if state[start]:
            continue
        path = [start]
        edges = [iter(needs[start])]
        state[start] = 1
        while path:
            step = next(edges[-1], None)
            if step is None:
                state[path.pop()] = 2
                edges.pop()
            elif state[step] == 1:
                return [graph.node[i] for i in path[path.index(step) :]]
            elif state[step] == 0:
                state[step] = 1
                path.append(step)
                edges.append(iter(needs[step]))
    return None


def cycle_text(cycle: list[Any]) -> str:
    """``node 'a' (Add) needs 'x', an output of node 'b' (Relu), which needs
    'y', an output of node 'a' (Add)``: a cycle of :func:`graph_cycle`."""

    def name(node: Any) -> str:
        kind = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        return f"node {node.name!r} ({kind})" if node.name else f"an unnamed {kind} node"

    parts = []
    for i, node in enumerate(cycle):
        after = cycle[(i + 1) % len(cycle)]
        value = next(n for n in after.output if n and n in set(node.input) | _subgraph_reads(node))
        parts.append(
            f"{name(node) if i == 0 else 'which'} needs {value!r}, an output of {name(after)}"
        )
    return ", ".join(parts)


def _subgraph_reads(node: Any) -> set[str]:
    names: set[str] = set()
    for attribute in node.attribute:
        subgraphs = [attribute.g] if attribute.HasField("g") else []
        for subgraph in [*subgraphs, *attribute.graphs]:
            names.update(_outer_names(subgraph))
    return names


# Set while a caller that reports wrong forms itself (verify) opens sessions.
_REPORTED_BY_CALLER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "opbridge_wrong_forms_reported", default=False
)


@contextlib.contextmanager
def reporting_wrong_forms() -> Iterator[None]:
    """Within it, the sessions of opbridge's runtimes neither warn of nor
    refuse the forms their runtime computes wrong: for a caller that reports
    them itself (verify's "no operator ... computes wrong" check)."""
    token = _REPORTED_BY_CALLER.set(True)
    try:
        yield
    finally:
        _REPORTED_BY_CALLER.reset(token)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stacklevel_outside_opbridge() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the caller that names
    the first frame outside opbridge (the call of the user's)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def _names(uses: list[WrongFormUse]) -> str:
    shown = [use.label() for use in uses[:4]]
    more = f" and {len(uses) - 4} more" if len(uses) > 4 else ""
    return ", ".join(shown) + more


def load_model(model: Any):
    """The ``onnx.ModelProto`` of a path, bytes or ``ModelProto`` (external
    data is not loaded). A file or bytes that do not parse as an ONNX model
    (e.g. a truncated file) give a ValueError naming the path and its size."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        try:
            return onnx.load(path, load_external_data=False)
        except DecodeError as error:
            size = os.path.getsize(path)
            raise ValueError(
                f"opbridge: {path} ({size} bytes) is not a readable ONNX model: {error} "
                "(a truncated or partly written file, or not an .onnx file)"
            ) from error
    if isinstance(model, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(model))
        except DecodeError as error:
            raise ValueError(
                f"opbridge: the {len(model)} bytes given are not a readable ONNX model: {error} "
                "(truncated, or not a serialized ModelProto)"
            ) from error
    return model


def feeds_call(session: Any, args: tuple) -> Callable[[], object]:
    """One call of ``session`` on the torch tensors ``args``, as NumPy feeds of
    ``run(None, feeds)`` by the session's input names, converted once: how
    bench calls a session where its runtime has no :attr:`BenchHooks.call` of
    its own."""
    names = [meta.name for meta in session.get_inputs()]
    feed = {name: a.detach().numpy() for name, a in zip(names, args, strict=True)}
    return lambda: session.run(None, feed)


@dataclass(frozen=True)
class ModelRewrite:
    """A runtime's own rewrite of a route's export, which bench times as one
    more implementation of the runtime (``<short>_<name>``: ONNX Runtime's
    ``contrib`` is ``ort_contrib``).

    - ``route`` and ``opset``: the export it starts from (``opset`` None:
      the exporter's default).
    - ``rewrite(proto)``: the rewritten ``ModelProto``, and the rules that
      fired with their counts.
    - ``label``: what bench calls the model it times.
    """

    route: str
    opset: int | None
    rewrite: Callable[[Any], tuple[Any, dict[str, int]]]
    label: str


@dataclass(frozen=True)
class BenchHooks:
    """What bench uses of a runtime beyond its sessions and levels (each
    optional; :attr:`Runtime.bench`).

    - ``rewrites``: the runtime's own rewrites of an export
      (:class:`ModelRewrite`), by name, which bench times beside the routes.
    - ``call(session, tensors)``: one call of a session on torch tensors, as
      bench times it (default :func:`feeds_call`).
    - ``profile(model, feeds, threads, calls, level)``: the time of each
      operator type (any unit) over ``calls`` runs of ``model`` after one
      untimed, by the runtime's own profiler; None where it has none.
    - ``matmul_ops``: its operator types that are matrix products, for the
      profile's shares.
    """

    rewrites: Mapping[str, ModelRewrite] = field(default_factory=dict)
    call: Callable[[Any, tuple], Callable[[], object]] = feeds_call
    profile: Callable[..., dict[str, float]] | None = None
    matmul_ops: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Runtime:
    """One runtime.

    - ``session(model, level=None, threads=None)``: a session on ``model``
      (a path, bytes or ``ModelProto``) with every operator library it needs
      registered, at optimization ``level`` (None: the runtime's default) with
      ``threads`` intra-op threads (None: the runtime's default).
    - ``plain_session(model, level=None)``: a session of the runtime as
      installed, with no operator library registered and each model-local
      function's body run as the body: where a model that must need no
      library runs (the ``standard`` and ``ort`` routes' models, and the
      ``function`` route's fallback); None for a runtime without one, where
      :func:`opbridge.sdk.testing.check_export` refuses those checks.
    - ``levels()``: the optimization levels it has, least to most.
    - ``base_level``: the level that runs the graph as exported (the others
      are compared with it); ``default_level``: what a deployed session uses.
    - ``level_names``: what a level is called in the runtime's own API
      (ONNX Runtime's ``enable_all``: ``ORT_ENABLE_ALL``), where it differs,
      for reports (:meth:`level_text`).
    - ``version()``: the installed runtime's version.
    - ``adapter``: the name of the runtime's adapter (``"ort"``,
      ``"openvino"``: ``opbridge_add_operator_library``'s ADAPTERS), whose
      library :meth:`library_path` finds beside a loaded operator library;
      ``missing_adapter``: why that file may be missing, for the error.
    - ``facts()``: (name, value) lines for ``opbridge doctor``, and
      ``checks()``: its :class:`RuntimeCheck` list (versions that fit, a
      model that runs with the library).
    - ``label``: its name in messages, docs and bench (``ort_custom``: the
      ``short`` name and the route).
    - ``library_kernels(model, feeds, level=None)``: the names of the
      model's library nodes (the nodes of its graph of a loaded library's
      domain, each with a name of its own) that ran as their library's
      kernel in one run of ``model`` (an ONNX path, bytes or ``ModelProto``) on
      ``feeds`` in a session like ``session``'s, as the runtime's own
      profiling tells; a library node missing from the set ran something
      else, a model-local function's body (the ``function`` route's
      fallback). None where the runtime cannot tell: verify then reports
      which ran as unknown.
    - ``wrong_forms``: ONNX operators (``"RotaryEmbedding"``,
      ``"com.microsoft::RotaryEmbedding"``) that this runtime computes wrong in
      some use, each with what is wrong (a :class:`WrongForm`, or its ``why``
      alone): an export for it avoids them
      (:attr:`opbridge.export.ExportOptions.avoid`), verify in it flags a
      model that has one, and its sessions warn of one
      (:class:`WrongFormWarning`), or refuse one whose known error is large
      (:class:`WrongFormError`; ``allow_wrong_forms=True`` runs it), by
      :meth:`check_wrong_forms`.
    - ``lowered_dtypes``: dtypes (``"float64"``) this runtime computes in
      another, each with what it does with them: its sessions warn of a
      model's inputs and outputs of one (:class:`PrecisionWarning`, by
      :meth:`check_dtypes`), and verify in it reports them.
    - ``bench``: what bench uses of it beyond its sessions and levels
      (:class:`BenchHooks`: its own rewrites of an export, how a session is
      called on torch tensors, its profiler).
    """

    name: str
    label: str
    short: str
    session: Callable[..., Any]
    levels: Callable[[], list[str]]
    base_level: str
    default_level: str
    version: Callable[[], str]
    adapter: str
    missing_adapter: str = ""
    plain_session: Callable[..., Any] | None = None
    level_names: Mapping[str, str] = field(default_factory=dict)
    facts: Callable[[], list[tuple[str, str]]] = field(default=lambda: [])
    checks: Callable[[], list[RuntimeCheck]] = field(default=lambda: [])
    library_kernels: Callable[..., set[str]] | None = None
    wrong_forms: dict[str, WrongForm] = field(default_factory=dict)
    lowered_dtypes: dict[str, str] = field(default_factory=dict)
    bench: BenchHooks = field(default_factory=BenchHooks)

    def library_path(self, library: Any) -> str:
        """The runtime's library of a loaded operator library
        (:class:`opbridge.Library`): its adapter's file, what a host of the
        runtime loads; a FileNotFoundError that names it where it is missing."""
        path = library.adapter_path(self.adapter)
        if not path.is_file():
            why = self.missing_adapter or f"rebuild or reinstall {library.name}"
            raise FileNotFoundError(
                f"{library.name}: the {self.label} library {path} is missing; {why}"
            )
        return str(path)

    def __post_init__(self) -> None:
        # A form given by its why alone is a WrongForm of no known error.
        forms = {
            form: wrong if isinstance(wrong, WrongForm) else WrongForm(str(wrong))
            for form, wrong in self.wrong_forms.items()
        }
        object.__setattr__(self, "wrong_forms", forms)

    def level_text(self, level: str) -> str:
        """``level`` as the runtime's own API calls it, else the runtime's
        name: what a report puts beside a level."""
        return self.level_names.get(level, self.name)

    def avoid(self) -> frozenset[str]:
        """What an export for this runtime must not emit (``wrong_forms``)."""
        return frozenset(self.wrong_forms)

    def wrong_form_uses(self, model: Any) -> list[WrongFormUse]:
        """The nodes of ``model`` (an ``onnx.ModelProto``: its graph, subgraphs
        and function bodies) in a form this runtime computes wrong."""
        return wrong_form_uses(model, self.wrong_forms)

    def check_wrong_forms(self, model: Any, *, allow_wrong_forms: bool = False) -> None:
        """What a session of this runtime does with a model (an
        ``onnx.ModelProto``) that has nodes of its ``wrong_forms``: raises
        :class:`WrongFormError` for those of a large known error
        (:attr:`WrongForm.large`), else warns (:class:`WrongFormWarning`),
        naming the nodes, what is wrong, and how to export the model without
        them. ``allow_wrong_forms=True``, or a caller that reports them
        itself (:func:`reporting_wrong_forms`), does neither."""
        if allow_wrong_forms or _REPORTED_BY_CALLER.get():
            return
        uses = self.wrong_form_uses(model)
        refused = [use for use in uses if use.wrong.large]
        if refused:
            raise WrongFormError(self._wrong_forms_message(refused, refused=True))
        if uses:
            warnings.warn(
                self._wrong_forms_message(uses, refused=False),
                WrongFormWarning,
                stacklevel=_stacklevel_outside_opbridge(),
            )

    def _wrong_forms_message(self, uses: list[WrongFormUse], *, refused: bool) -> str:
        by_form: dict[str, list[WrongFormUse]] = {}
        for use in uses:
            by_form.setdefault(use.form, []).append(use)
        parts = []
        for found in by_form.values():
            wrong = found[0].wrong
            known = f" (known max abs error {wrong.max_abs_err:g})" if wrong.max_abs_err else ""
            parts.append(f"{_names(found)}: {wrong.why}{known}")
        forms = "{" + ", ".join(repr(form) for form in by_form) + "}"
        way_out = (
            f"export it for {self.label}, which gives each op another form "
            f"(`opbridge export MODEL OUT --route ROUTE --runtime {self.name}`, or "
            f"opbridge.export.export(..., avoid={forms}))"
        )
        if refused:
            return (
                f"opbridge: {self.label} computes {', '.join(by_form)} wrong by a large error, "
                f"so the session refuses the model: {'; '.join(parts)}. Expected a model "
                f"without {forms}: {way_out}, or pass allow_wrong_forms=True to run it as given"
            )
        return (
            f"opbridge: {self.label} computes {', '.join(by_form)} wrong in some uses: "
            f"{'; '.join(parts)}. For a model without {forms}, {way_out}; "
            f"allow_wrong_forms=True runs it as given without this warning"
        )

    def lowered_dtype_uses(self, tensors: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Those of ``tensors`` (``(kind, name, dtype)``: ``("input", "x",
        "float64")``) whose dtype this runtime computes in another."""
        return [tensor for tensor in tensors if tensor[2] in self.lowered_dtypes]

    def onnx_tensors(self, model: Any) -> list[tuple[str, str, str]]:
        """``(kind, name, dtype)`` of an ``onnx.ModelProto``'s graph inputs
        (initializers aside) and outputs, as :meth:`lowered_dtype_uses`
        takes them."""
        import onnx

        def dtype(value: Any) -> str:
            elem_type = value.type.tensor_type.elem_type
            try:
                return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
            except (KeyError, TypeError, ValueError):
                return onnx.TensorProto.DataType.Name(elem_type).lower()

        initializers = {init.name for init in model.graph.initializer}
        inputs = [v for v in model.graph.input if v.name not in initializers]
        return [("input", v.name, dtype(v)) for v in inputs] + [
            ("output", v.name, dtype(v)) for v in model.graph.output
        ]

    def lowered_dtypes_message(self, uses: list[tuple[str, str, str]]) -> str:
        """What :meth:`check_dtypes` and verify say of ``uses`` (from
        :meth:`lowered_dtype_uses`): the tensors, by dtype, and what this
        runtime does with each dtype. Names are escaped (``ascii``)."""
        by_dtype: dict[str, list[str]] = {}
        for kind, name, dtype in uses:
            by_dtype.setdefault(dtype, []).append(f"{kind} {name!a}")
        parts = []
        for dtype, named in by_dtype.items():
            shown = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
            parts.append(f"{dtype} ({shown}): {self.lowered_dtypes[dtype]}")
        return "; ".join(parts)

    def check_dtypes(self, tensors: list[tuple[str, str, str]]) -> None:
        """What a session of this runtime does with a model whose inputs and
        outputs (``tensors``, as :meth:`lowered_dtype_uses` takes them) have
        a dtype it computes in another: warns (:class:`PrecisionWarning`),
        naming them and what it does with them, unless the caller reports
        them itself (verify, :func:`reporting_wrong_forms`)."""
        if _REPORTED_BY_CALLER.get():
            return
        uses = self.lowered_dtype_uses(tensors)
        if uses:
            warnings.warn(
                f"opbridge: {self.label} does not compute the model's numbers in their dtype: "
                f"{self.lowered_dtypes_message(uses)}. Run the model in float32 (cast it "
                f"before export), or in a runtime that computes float64 (ONNX Runtime)",
                PrecisionWarning,
                stacklevel=_stacklevel_outside_opbridge(),
            )

    def timer(self, threads: int | None = None, level: str | None = None) -> Callable:
        """``timer(op, route, model_bytes, feeds) -> ms``: the median of
        ``REPEATS`` runs after ``WARMUP`` of a session at ``level`` (default
        ``default_level``) with ``threads`` intra-op threads."""

        def timer(op: str, route: str, model: bytes, feeds: dict) -> float:
            session = self.session(model, level=level or self.default_level, threads=threads)
            return median_ms(lambda: session.run(None, feeds))

        return timer


def smoke_error(run: Callable[[Any, dict], list]) -> float:
    """The smoke test ``opbridge doctor`` runs in each runtime: a one-node
    custom-route model (``opbridge::RmsNorm`` on x [2, 8], weight [8]) run by
    ``run(model, feeds)`` (the runtime's session on the ``ModelProto``,
    returning the outputs), against the PyTorch call; the max abs error."""
    import numpy as np
    import torch
    from onnx import TensorProto, helper

    from opbridge.ops import rms_norm

    node = helper.make_node("RmsNorm", ["x", "w"], ["y"], domain="opbridge", eps=1e-6)
    graph = helper.make_graph(
        [node],
        "doctor",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("opbridge", 1)],
        ir_version=10,
    )
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    (got,) = run(model, {"x": x, "w": w})
    expected = rms_norm(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    return float(np.abs(np.asarray(got) - expected).max())


# Shared objects seen mapped right after a doctor check ran its model
# (smoke_check): a runtime may unmap a library once its session is gone.
_MAPPED_DURING_CHECKS: set[str] = set()


def _mapped_now() -> set[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = (line.split()[-1] for line in maps if len(line.split()) >= 6)
            return {path for path in paths if path.startswith("/") and ".so" in path}
    except OSError:
        return set()


def loaded_libraries(keys: tuple[str, ...]) -> list[str]:
    """The shared objects mapped into this process (now, or while a runtime's
    doctor check ran its model) whose path has one of ``keys`` in it."""
    found = _mapped_now() | _MAPPED_DURING_CHECKS
    return sorted(path for path in found if any(key in path for key in keys))


def smoke_check(label: str, run: Callable[[Any, dict], list]) -> RuntimeCheck:
    """:func:`smoke_error` as a runtime's doctor check, ``<label> runs
    opbridge::RmsNorm``: at most 1e-5 off; an error running it is the
    check's detail."""
    name = f"{label} runs opbridge::RmsNorm"

    def run_and_see(model: Any, feeds: dict) -> list:
        outputs = run(model, feeds)
        _MAPPED_DURING_CHECKS.update(_mapped_now())
        return outputs

    try:
        error = smoke_error(run_and_see)
    except Exception as failure:
        return RuntimeCheck(name, False, str(failure))
    return RuntimeCheck(name, error <= 1e-5, f"max abs err {error:.2e}")


def median_ms(call: Callable[[], object], warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    """The median of ``repeats`` timed calls after ``warmup``, in milliseconds."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def check_threads(threads: Any, caller: str, runtime: str) -> None:
    """``threads`` is None (the runtime's default) or an int >= 1; else a
    ValueError that names ``caller`` and what it got."""
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(
            f"{caller}: threads must be an int >= 1 (or None for {runtime}'s default), "
            f"got {threads!r}"
        )
