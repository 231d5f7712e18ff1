"""OpenVINO with opbridge's extension libraries added.

Each operator library built with the SDK has, beside its ONNX Runtime
library, an OpenVINO extension library (``lib<name>_openvino.so``) where
OpenVINO's CMake package was found at build time: the ONNX frontend's
conversion of the library's domain, the PyTorch frontend's conversion of
its ops (``openvino.convert_model`` of a ``torch.export`` program or a
TorchScript model, given the extension), and the ops an IR written by
``ov.save_model`` reads back with. :func:`compile_model` and the runtime's
sessions add the extension of every loaded library;
:func:`register_with_transformers` hands them to transformers'
``OpenVINOExporter``.

Precision: OpenVINO's CPU plugin computes in bfloat16 by default on CPUs
that have it, a change of the model's numbers. Everything here compiles
with ``INFERENCE_PRECISION_HINT`` f32 unless the caller asks for another.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbridge import _dtypes
from opbridge._imports import WaitingFinder, when_imported
from opbridge._library import (
    BUILTIN,
    ON_LOAD,
    Library,
    libraries,
    library_for_domain,
    library_nodes,
)
from opbridge.runtimes.base import (
    Runtime,
    RuntimeCheck,
    WrongForm,
    check_threads,
    cycle_text,
    graph_cycle,
    load_model,
    smoke_check,
)
from opbridge.runtimes.model import (
    ModelFacts,
    check_op_types,
    libraries_for,
    local_function_domains,
    nodes,
    used_domains,
)

PRECISION_HINT = "INFERENCE_PRECISION_HINT"
THREADS = "INFERENCE_NUM_THREADS"
# OpenVINO has no graph optimization levels like ONNX Runtime's: a compiled
# model is always optimized by its plugin. One level, for verify and bench.
LEVEL = "default"


def _extension_file(library: Library) -> Path:
    return library.adapter_path("openvino")


def get_library_path(library: Library | None = None) -> str:
    """Absolute path of an OpenVINO extension library: opbridge's own by
    default, or that of a loaded ``library``; what ``core.add_extension``
    takes."""
    return RUNTIME.library_path(library or BUILTIN)


def register_with_transformers(*, required: bool = True) -> list[str]:
    """Adds the OpenVINO extension of every loaded library that has one (and
    opbridge's own, which must where ``required``) to the extensions
    transformers' ``OpenVINOExporter`` passes to ``openvino.convert_model``,
    so that it converts a model ``opbridge.patch`` changed; returns the
    paths it added (none where each was there already). Importing opbridge
    does this when transformers' exporter is imported, and again for every
    library loaded later (:func:`install_transformers_door`).

    transformers has no public hook for this: the list is
    ``transformers.exporters.exporter_openvino._OV_CONVERSION_EXTENSIONS``,
    private to transformers, and a RuntimeError says so where a release no
    longer has it."""
    import transformers
    from transformers.exporters import exporter_openvino

    extensions = getattr(exporter_openvino, "_OV_CONVERSION_EXTENSIONS", None)
    if not isinstance(extensions, list):
        raise RuntimeError(
            f"transformers {transformers.__version__} has no list "
            "transformers.exporters.exporter_openvino._OV_CONVERSION_EXTENSIONS (private to "
            "transformers) to add opbridge's OpenVINO extensions to"
        )
    there = {extension for extension in extensions if isinstance(extension, str)}
    added = []
    for library in libraries():
        if not _extension_file(library).is_file() and (library is not BUILTIN or not required):
            continue
        path = RUNTIME.library_path(library)
        if path not in there:
            extensions.append(path)
            there.add(path)
            added.append(path)
    return added


# transformers' OpenVINOExporter passes this module's list of extensions to
# openvino.convert_model.
TRANSFORMERS_EXPORTER = "transformers.exporters.exporter_openvino"
_DOOR_LOCK = threading.Lock()


def _register_with_transformers_quietly() -> None:
    """:func:`register_with_transformers` for what is built; a warning,
    not an error, where transformers no longer has the list (the import
    that brought it here goes on)."""
    try:
        register_with_transformers(required=False)
    except RuntimeError as error:
        warnings.warn(
            f"opbridge: transformers' OpenVINOExporter will not convert opbridge's "
            f"operators: {error}",
            stacklevel=3,
        )


class _TransformersFinder(WaitingFinder):
    """Waits for the import of transformers' OpenVINO exporter (once)."""


def _on_load(library: Library) -> None:
    if TRANSFORMERS_EXPORTER in sys.modules:
        _register_with_transformers_quietly()


def install_transformers_door() -> None:
    """Hands every loaded library's OpenVINO extension to transformers'
    ``OpenVINOExporter`` (:func:`register_with_transformers`): at once if
    its module is imported, else through one import finder that waits for
    that import and removes itself when it comes; and the extension of every
    library loaded later (opbridge does not import transformers itself)."""
    with _DOOR_LOCK:
        if _on_load not in ON_LOAD:
            ON_LOAD.append(_on_load)
        when_imported(
            TRANSFORMERS_EXPORTER, _register_with_transformers_quietly, _TransformersFinder
        )


_CORE_LOCK = threading.Lock()
_CORE: Any = None
_ADDED: dict[int, set[str]] = {}


def _shared_core():
    global _CORE
    import openvino

    with _CORE_LOCK:
        if _CORE is None:
            _CORE = openvino.Core()
        return _CORE


def add_extensions(core: Any, libraries_to_add: list[Library]) -> None:
    """Adds each library's OpenVINO extension to ``core`` (once per core)."""
    import openvino

    added = _ADDED.setdefault(id(core), set())
    for library in libraries_to_add:
        path = RUNTIME.library_path(library)
        if path in added:
            continue
        try:
            core.add_extension(path)
        except Exception as error:
            raise RuntimeError(
                f"{library.name}: OpenVINO {openvino.__version__} could not add the extension "
                f"{path}: {error}"
            ) from error
        added.add(path)


def _is_onnx(model: Any) -> bool:
    if isinstance(model, bytes | bytearray) or hasattr(model, "SerializeToString"):
        return True
    return isinstance(model, str | os.PathLike) and not os.fspath(model).endswith(".xml")


def _extensions_for(proto: Any) -> list[Library]:
    """The libraries whose extension a model needs: for an ONNX model
    (``proto``, its ``ModelProto``), those of the domains it uses (after the
    same checks ONNX Runtime's sessions make: domain versions, op types);
    for an IR, an ``openvino.Model`` or a file opbridge cannot read
    (``proto`` None), every loaded library that has one."""
    if proto is not None:
        needed = libraries_for(proto, _extension_file)
        check_op_types(proto, _extension_file)
        # A library without an extension is needed where one of its nodes has
        # no body to fall back on (the missing extension is then the error).
        used = used_domains(proto) - local_function_domains(proto)
        return [
            library
            for library in needed
            if library.onnx_domain in used or library.adapter_path("openvino").is_file()
        ]
    return [library for library in libraries() if library.adapter_path("openvino").is_file()]


def _inline_local_functions(model: Any, proto: Any, with_libraries: bool = True):
    """The ONNX ``model`` with its own functions inlined, but for those a
    loaded library with an extension implements (the ``function`` route's:
    the library's kernel runs) when ``with_libraries``; None when there is
    nothing to inline.
    OpenVINO's ONNX reader converts a call of a model-local function only
    where an extension knows its domain ("No conversion rule found"), so a
    function's body, the fallback of the ``function`` route included, is
    inlined here. A model read from a file is read with its external data."""
    import onnx
    from onnx.inliner import inline_selected_functions

    if not proto.functions:
        return None
    kept = []
    for function in proto.functions:
        library = library_for_domain(function.domain)
        if (
            with_libraries
            and library is not None
            and library.adapter_path("openvino").is_file()
            and any(spec.get("onnx_type") == function.name for spec in library.specs().values())
        ):
            kept.append((function.domain, function.name))
    if len(kept) == len(proto.functions):
        return None
    if isinstance(model, str | os.PathLike):
        proto = onnx.load(os.fspath(model))
    return inline_selected_functions(proto, kept, exclude=True)


def _escape_node_names(model: Any, proto: Any) -> Any:
    """The ONNX ``model`` (``proto``: its ``ModelProto``) with a NUL in a
    node's name written ``\\x00``: OpenVINO's ONNX reader starts an error
    with the node's name, and a NUL there cuts the message before the reason
    (opbridge's or its own)."""
    graphs = [proto.graph, *proto.functions]
    if not any("\x00" in node.name for graph in graphs for node in nodes(graph)):
        return model
    # A copy: the caller's model stays as given.
    proto = type(proto).FromString(proto.SerializeToString())
    graphs = [proto.graph, *proto.functions]
    for graph in graphs:
        for node in nodes(graph):
            node.name = node.name.replace("\x00", "\\x00")
    return proto


def _check_acyclic(proto: Any) -> None:
    """Raises for a cycle in the model's graph or a function's body, which
    ONNX does not allow: OpenVINO's ONNX reader would allocate memory on it
    until it fails (std::bad_alloc), a known fault of OpenVINO 2026.4."""
    bodies = [("the graph", proto.graph)]
    bodies += [(f"function {f.domain}::{f.name}", f) for f in proto.functions]
    for where, body in bodies:
        cycle = graph_cycle(body)
        if cycle is not None:
            raise RuntimeError(
                f"opbridge.runtimes.openvino.read_model: {where} of the model has a cycle, which "
                "ONNX "
                f"does not allow: {cycle_text(cycle)} (OpenVINO's ONNX reader would allocate "
                "memory until it fails)"
            )


def read_model(
    model: Any, core: Any = None, *, allow_wrong_forms: bool = False, with_libraries: bool = True
):
    """An ``openvino.Model`` of ``model`` (an ONNX path, bytes or
    ``ModelProto``, an IR ``.xml`` path, or an ``openvino.Model``) with the
    extensions it needs added to ``core`` (default: opbridge's shared one).
    ``with_libraries=False`` adds none and inlines every model-local
    function: the model as OpenVINO without opbridge reads it.

    An ONNX model with a node of a form OpenVINO computes wrong
    (``RUNTIME.wrong_forms``: in the graph, a subgraph or a function body)
    is refused where the form's known error is large
    (:class:`~opbridge.runtimes.WrongFormError`: com.microsoft
    ``RotaryEmbedding``), and warned of otherwise
    (:class:`~opbridge.runtimes.WrongFormWarning`); both name the node and
    the export that leaves the form out. ``allow_wrong_forms=True`` reads
    it as given."""
    import openvino

    core = core or _shared_core()
    # An ONNX model is parsed once, for every check; OpenVINO still reads a
    # path itself (external data lies beside it). One opbridge cannot read
    # (a missing file) goes to OpenVINO as given, which says what is wrong.
    onnx_model = not isinstance(model, openvino.Model) and _is_onnx(model)
    proto = ModelFacts.of(model).proto if onnx_model else None
    if with_libraries:
        add_extensions(core, _extensions_for(proto))
    if isinstance(model, openvino.Model):
        return model
    if proto is not None:
        _check_acyclic(proto)
        RUNTIME.check_wrong_forms(proto, allow_wrong_forms=allow_wrong_forms)
        inlined = _inline_local_functions(model, proto, with_libraries)
        if inlined is not None:
            model = inlined
        model = _escape_node_names(model, proto if inlined is None else inlined)
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    if isinstance(model, bytes | bytearray):
        # An ONNX model from memory (its weights are inside it).
        return core.read_model(bytes(model), b"")
    return core.read_model(os.fspath(model))


def compile_model(
    model: Any,
    device_name: str | None = None,
    config: dict | None = None,
    *,
    threads: int | None = None,
    core: Any = None,
    allow_wrong_forms: bool = False,
    with_libraries: bool = True,
    **kwargs: Any,
):
    """OpenVINO's own ``CompiledModel`` of ``model`` (an ONNX path, bytes or
    ``ModelProto``, an IR ``.xml`` path, or an ``openvino.Model``), with
    every loaded operator library's extension added
    (``with_libraries=False``: none, as :func:`read_model` says).

    Takes ``openvino.Core.compile_model``'s arguments by its names and with
    its defaults: ``device_name`` (None: OpenVINO's choice, the AUTO
    plugin), ``config`` (OpenVINO's properties; never changed: a copy gets
    opbridge's settings) and its other keywords (``weights=``). One setting
    differs, on purpose: ``INFERENCE_PRECISION_HINT`` is f32 unless
    ``config`` names another (OpenVINO would otherwise pick bfloat16 on CPUs
    that have it, a silent change of the numbers). Errors are OpenVINO's
    (a missing file is its ``RuntimeError``), but for opbridge's checks of an
    ONNX model (:func:`read_model`).

    opbridge's keywords: ``threads`` sets ``INFERENCE_NUM_THREADS``;
    ``core`` is the ``openvino.Core`` to use (default: one shared by
    opbridge's calls). An ONNX model with a form OpenVINO computes wrong is
    warned of or refused as :func:`read_model` says;
    ``allow_wrong_forms=True`` compiles it as given.
    """
    import openvino

    check_threads(threads, "opbridge.runtimes.openvino.compile_model", "OpenVINO")
    core = core or _shared_core()
    settings = dict(config or {})
    settings.setdefault(PRECISION_HINT, openvino.Type.f32)
    if threads is not None:
        settings[THREADS] = threads
    read = read_model(
        model, core, allow_wrong_forms=allow_wrong_forms, with_libraries=with_libraries
    )
    if isinstance(read, openvino.Model):
        RUNTIME.check_dtypes(_tensors_of(read))
    compiled = core.compile_model(read, device_name, settings, **kwargs)
    if _one_thread(compiled, settings):
        return _ErrorKeepingCompiledModel(compiled)
    return compiled


def _tensors_of(model: Any) -> list[tuple[str, str, str]]:
    """``(kind, name, dtype)`` of an ``openvino.Model``'s inputs and outputs."""
    tensors = []
    for kind, ports in (("input", model.inputs), ("output", model.outputs)):
        for index, port in enumerate(ports):
            names = port.get_names()
            name = sorted(names)[0] if names else f"#{index}"
            type_name = port.get_element_type().get_type_name()
            tensors.append((kind, name, _dtypes.FROM_OPENVINO.get(type_name, type_name)))
    return tensors


def _one_thread(compiled: Any, settings: dict) -> bool:
    """Whether the compiled model infers on one thread: as the device says,
    else (the AUTO plugin does not say) as asked, or on a one-core machine."""
    try:
        return int(compiled.get_property(THREADS)) == 1
    except Exception:  # a device without the property
        return settings.get(THREADS) == 1 or os.cpu_count() == 1


# At one inference thread, OpenVINO's CPU plugin (2026.4) runs a synchronous
# infer() by a shortcut that loses every exception raised while the graph
# runs (a node's evaluate: opbridge's run-time shape checks and
# OPBRIDGE_CHECK findings, and OpenVINO's own): infer() returns outputs of a
# made-up shape or uninitialized data, and a later call may crash. Its
# asynchronous path keeps them, so the compiled models and requests
# compile_model returns at one thread run infer() as start_async() + wait().
def _request_class():
    import openvino
    from openvino.utils.data_helpers import OVDict

    class ErrorKeepingInferRequest(openvino.InferRequest):
        """OpenVINO's InferRequest whose infer() keeps the errors raised
        while the graph runs, at one thread too (start_async + wait)."""

        def infer(self, inputs=None, share_inputs=False, share_outputs=False, **kwargs):
            del kwargs  # decode_strings: the results decode strings as infer() does
            self.start_async(inputs, share_inputs=share_inputs)
            self.wait()
            if share_outputs:
                return OVDict({port: self.get_tensor(port).data for port in self.model_outputs})
            return self.results  # copies

    return ErrorKeepingInferRequest


class _ErrorKeepingCompiledModel:
    """Made on first use (openvino is imported lazily): see __new__."""

    _class: Any = None

    def __new__(cls, compiled: Any):
        if cls._class is None:
            import openvino

            request_class = _request_class()

            class ErrorKeepingCompiledModel(openvino.CompiledModel):
                """OpenVINO's CompiledModel whose requests keep the errors
                raised while the graph runs, at one thread too."""

                def create_infer_request(self):
                    # OpenVINO's base class's request, as CompiledModel wraps it.
                    return request_class(super(openvino.CompiledModel, self).create_infer_request())

            cls._class = ErrorKeepingCompiledModel
        return cls._class(compiled)


@dataclass(frozen=True)
class IOInfo:
    """A model input or output, as ONNX Runtime's ``NodeArg`` names it."""

    name: str
    shape: list
    type: str


class Session:
    """A compiled model behind ONNX Runtime's session interface (the part
    verify and bench use): ``get_inputs()``, ``get_outputs()`` and
    ``run(output_names, feeds) -> list of arrays``."""

    def __init__(self, compiled: Any):
        self.compiled_model = compiled
        self._request = compiled.create_infer_request()

    @staticmethod
    def _info(port: Any) -> IOInfo:
        shape = port.get_partial_shape()
        dims = (
            [d.get_length() if d.is_static else None for d in shape] if shape.rank.is_static else []
        )
        return IOInfo(port.get_any_name(), dims, str(port.get_element_type()))

    def get_inputs(self) -> list[IOInfo]:
        return [self._info(port) for port in self.compiled_model.inputs]

    def get_outputs(self) -> list[IOInfo]:
        return [self._info(port) for port in self.compiled_model.outputs]

    def run(self, output_names: list[str] | None, feeds: dict) -> list:
        import numpy as np

        # The inputs are read in place (the feeds outlive the call); the
        # outputs are the request's own tensors, copied once, as ONNX
        # Runtime's run() returns arrays of their own (the next call
        # overwrites the request's). Without sharing, OpenVINO copies both
        # ways through its dictionary: 102 ms against 53 ms for a 128 MiB
        # rms_norm whose kernel takes 13 ms.
        # start_async + wait, not infer(): at one thread OpenVINO's infer()
        # loses the errors raised while the graph runs (see
        # _ErrorKeepingCompiledModel); the asynchronous path keeps them.
        self._request.start_async(feeds, share_inputs=True)
        self._request.wait()
        ports = self.compiled_model.outputs
        if output_names is not None:
            by_name = {port.get_any_name(): port for port in ports}
            ports = [by_name[name] for name in output_names]
        return [np.array(self._request.get_tensor(port).data, copy=True) for port in ports]


def _check_level(level: str | None) -> None:
    if level not in (None, LEVEL):
        raise ValueError(
            f"opbridge.runtimes.openvino: unknown level {level!r}; OpenVINO has one, {LEVEL!r}"
        )


def _session(model: Any, level: str | None = None, threads: int | None = None) -> Session:
    _check_level(level)
    return Session(compile_model(model, "CPU", threads=threads))


def _plain_session(model: Any, level: str | None = None) -> Session:
    """A session of the model compiled as :func:`compile_model` compiles it,
    in a core of its own with no extension added and every model-local
    function inlined (OpenVINO's ONNX reader converts a call of one only
    where an extension knows its domain)."""
    import openvino

    _check_level(level)
    return Session(compile_model(model, "CPU", core=openvino.Core(), with_libraries=False))


def library_kernels(model: Any, feeds: dict, level: str | None = None) -> set[str]:
    """The names of the ONNX model's library nodes (:func:`library_nodes
    <opbridge._library.library_nodes>`, each named) that ran as
    their library's kernel in one run on ``feeds`` of a session at
    ``level``, by OpenVINO's profiling (``PERF_COUNT``): the node became its
    library's operator when read (one with the node's domain and op type,
    and its output values), and that operator executed. A model-local
    function's body, inlined, is other operators."""
    import openvino

    _check_level(level)
    proto = load_model(model)
    read = read_model(proto)
    # (domain, op type, output value) -> the operator's name, for the
    # libraries' operators.
    operators = {}
    for op in read.get_ordered_ops():
        info = op.get_type_info()
        if library_for_domain(info.version_id) is None:
            continue
        for output in op.outputs():
            for value in output.get_names():
                operators[(info.version_id, info.name, value)] = op.get_friendly_name()
    compiled = compile_model(read, "CPU", config={"PERF_COUNT": True})
    request = compiled.create_infer_request()
    request.infer(feeds)
    executed = {
        info.node_name
        for info in request.get_profiling_info()
        if info.status == openvino.ProfilingInfo.Status.EXECUTED
    }
    ran = set()
    for node in library_nodes(proto):
        found = {operators.get((node.domain, node.op_type, value)) for value in node.output}
        if node.name and found & executed:
            ran.add(node.name)
    return ran


def _levels() -> list[str]:
    return [LEVEL]


def _version() -> str:
    import openvino

    return openvino.__version__.split("-")[0]


def built_with(library: Library | None = None) -> str:
    """The OpenVINO release a library's extension was compiled against (an
    extension is C++: it works only in that release)."""
    import openvino  # noqa: F401  (loads libopenvino, which the extension links)

    handle = ctypes.CDLL(get_library_path(library))
    function = handle.opbridge_openvino_built_with
    function.restype = ctypes.c_char_p
    return function().decode()


def _installed() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def _checks() -> list[RuntimeCheck]:
    """Without OpenVINO (an optional runtime) nothing; else the release the
    extension was built with against the running one, and a one-node model
    run through the extension."""
    if not _installed() or not BUILTIN.adapter_path("openvino").is_file():
        return []
    running = _version()
    try:
        built = built_with()
        checks = [
            RuntimeCheck(
                "OpenVINO matches the extension's build",
                built == running,
                f"built against {built}, running {running}",
            )
        ]
    except Exception as failure:
        checks = [RuntimeCheck("OpenVINO matches the extension's build", False, str(failure))]
    checks.append(smoke_check("OpenVINO", lambda model, feeds: _session(model).run(None, feeds)))
    return checks


def _facts() -> list[tuple[str, str]]:
    if not _installed():
        return [("OpenVINO", "not installed (optional)")]
    path = BUILTIN.adapter_path("openvino")
    return [
        ("OpenVINO", _version()),
        ("OpenVINO extension", str(path) if path.is_file() else f"{path} (not built)"),
    ]


RUNTIME = Runtime(
    name="openvino",
    label="OpenVINO",
    short="ov",
    session=_session,
    levels=_levels,
    base_level=LEVEL,
    default_level=LEVEL,
    version=_version,
    adapter="openvino",
    missing_adapter="it is built only where OpenVINO's CMake package is found (install the "
    "openvino Python package and rebuild the library)",
    plain_session=_plain_session,
    facts=_facts,
    checks=_checks,
    library_kernels=library_kernels,
    # Localized, with the smallest model that shows each, in
    # tests/runtimes/test_openvino_forms.py (OpenVINO 2026.4.1, f32). The
    # errors: the worst of those reproducers (com.microsoft's: 4.6 to 5.6,
    # refused by the sessions), and the LLaMA-style stack's (ai.onnx's).
    wrong_forms={
        "com.microsoft::RotaryEmbedding": WrongForm(
            "a start-offset position_ids (shape [1], what the ort route emits for a shared "
            "cos/sin table) is read as position 0 for every token, and a rotary_embedding_dim "
            "below the head size rotates wrongly",
            max_abs_err=5.6,
        ),
        "RotaryEmbedding": WrongForm(
            "wrong on the query of an attention block at batch 2 and more (0.18 to 0.37 on "
            "the LLaMA-style stack), right alone",
            max_abs_err=0.37,
        ),
    },
    # tests/runtimes/test_openvino.py shows it (OpenVINO 2026.4.1, CPU).
    lowered_dtypes={
        "float64": (
            "OpenVINO's CPU plugin computes it in float32: values are rounded to float32, "
            "and inf and values beyond float32's range become +-3.4e38 (a sum with inf gives "
            "a finite number where float64 gives inf or NaN); outputs keep the float64 dtype "
            "with float32's precision"
        ),
    },
)
