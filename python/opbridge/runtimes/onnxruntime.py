"""ONNX Runtime with opbridge's custom-op libraries registered."""

from __future__ import annotations

import ctypes
import difflib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from opbridge._library import (
    BUILTIN,
    METADATA_DOMAIN_VERSION_PREFIX,
    ONNX_DOMAIN,
    ONNX_DOMAIN_VERSION,
    VERSION,
    Library,
    libraries,
    library_for_domain,
)
from opbridge.runtimes.base import (
    ModelRewrite,
    Runtime,
    RuntimeCheck,
    feeds_call,
    load_model,
    smoke_check,
)

# IO binding (run repeatedly without copies), re-exported: opbridge.runtimes.onnxruntime.bind.
from opbridge.runtimes.ort_binding import BoundSession as BoundSession
from opbridge.runtimes.ort_binding import bind as bind

LIBRARY_NAME = "libopbridge_ort.so"
# Domains ONNX Runtime implements itself (and the exporters' function domains).
_RUNTIME_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}
_RUNTIME_DOMAIN_PREFIXES = ("com.microsoft", "com.ms.", "pkg.")


def _path_of(library: Library) -> str:
    path = library.adapter_path("ort")
    if not path.is_file():
        raise FileNotFoundError(
            f"{library.name}: the ONNX Runtime library {path} is missing; rebuild or reinstall "
            f"{library.name}"
        )
    return str(path)


def get_library_path(library: Library | None = None) -> str:
    """Absolute path of an ONNX Runtime custom-op library: opbridge's own
    (domain ``opbridge``) by default, or that of a loaded ``library``."""
    return _path_of(library or BUILTIN)


def library_info(library: Library | None = None) -> dict[str, Any]:
    """What an ONNX Runtime custom-op library says about itself: its name,
    version, ONNX domains with the newest version of each it implements, and
    operators (``OpbridgeLibraryInfo()`` of ``csrc/ort_adapter/library_info.h``,
    the function a C++ host calls). opbridge's own library by default, or that
    of a loaded ``library``."""
    path = get_library_path(library)
    try:
        info = ctypes.CDLL(path).OpbridgeLibraryInfo
    except (OSError, AttributeError) as error:
        raise RuntimeError(
            f"{(library or BUILTIN).name}: {path} does not report what it is "
            f"(OpbridgeLibraryInfo): {error}; rebuild it with this SDK"
        ) from error
    info.restype = ctypes.c_char_p
    return json.loads(info().decode())


def session_options(options: Any = None, libraries: list[Library] | None = None):
    """``onnxruntime.SessionOptions`` (a new one, or ``options``) with the
    custom-op libraries registered: opbridge's own by default, else ``libraries``."""
    import onnxruntime

    options = options if options is not None else onnxruntime.SessionOptions()
    for library in libraries if libraries is not None else [BUILTIN]:
        path = get_library_path() if library is BUILTIN else _path_of(library)
        try:
            options.register_custom_ops_library(path)
        except Exception as error:
            raise RuntimeError(
                f"{library.name}: ONNX Runtime {onnxruntime.__version__} could not load "
                f"{path}: {error}"
            ) from error
    return options


def _closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` most likely misspells: equal but for case, or
    close to it (difflib, ignoring case); None when none is close."""
    by_folded = {candidate.casefold(): candidate for candidate in candidates}
    folded = name.casefold()
    if folded in by_folded:
        return by_folded[folded]
    close = difflib.get_close_matches(folded, list(by_folded), n=1, cutoff=0.8)
    return by_folded[close[0]] if close else None


# A runtime's file of an operator library, which messages name.
LibraryFile = Callable[[Library], Path]


def _ort_file(library: Library) -> Path:
    return library.adapter_path("ort")


def libraries_for(model: Any, library_file: LibraryFile | None = None) -> list[Library]:
    """The loaded libraries a model needs (opbridge's own always comes first),
    after checking each domain's version against the model.

    A library is needed wherever a node of its domain is: in the graph, in
    the subgraphs of If, Loop and Scan nodes, and in the bodies of the
    model's own functions, on every route: a ``function``-route node (one
    with a model-local function of its domain and op type, the fallback
    body) needs its library too, so that the runtime runs the library's
    kernel rather than the body. A custom domain without a loaded library
    whose every node calls one of the model's own functions needs nothing
    (the runtime runs the bodies). A model that uses any other custom domain
    no loaded library provides is refused
    with a message saying how to load one (and naming a loaded library's
    domain the model's may misspell). The message ends with the model's
    domain, escaped (``ascii``), so that no character of it can garble the
    rest. ``library_file`` is the runtime's file of a library, which
    messages name (default: its ONNX Runtime library).
    """
    file_of = library_file or _ort_file
    proto = load_model(model)
    check_domain_version(proto, file_of)
    needed = [BUILTIN]
    local = local_function_domains(proto)
    for domain in sorted(used_domains(proto)):
        if domain in _RUNTIME_DOMAINS or domain.startswith(_RUNTIME_DOMAIN_PREFIXES):
            continue
        library = library_for_domain(domain)
        if library is None and domain in local:
            continue  # only calls of the model's own functions: their bodies run
        if library is None:
            loaded = libraries()
            names = ", ".join(f"{lib.onnx_domain} ({file_of(lib).name})" for lib in loaded)
            closest = _closest(domain, (lib.onnx_domain for lib in loaded))
            hint = f"did you mean '{closest}'? Otherwise load" if closest else "load"
            raise RuntimeError(
                f"opbridge: the model uses ONNX domain {domain!a}, which no loaded operator "
                f"library provides (loaded: {names}); {hint} its library first with "
                f"opbridge.load_library(path). Unknown domain: {domain!a}"
            )
        if library is not BUILTIN:
            needed.append(library)
    return needed


def used_domains(proto: Any) -> set[str]:
    """The domain of every node of the model wherever it is: the graph, the
    subgraphs of its If, Loop and Scan nodes, and the bodies of its local
    functions (a library node inside a function body selects its library
    like any other)."""
    graphs = [proto.graph, *proto.functions]
    return {node.domain for graph in graphs for node in _nodes(graph)}


def local_function_domains(proto: Any) -> set[str]:
    """The domains whose every node (in the graph, its subgraphs and the
    model's functions) calls one of the model's own functions: a runtime
    can run each of them without a library, by the function's body (the
    ``function`` route's fallback)."""
    functions = {(function.domain, function.name) for function in proto.functions}
    graphs = [proto.graph, *proto.functions]
    by_domain: dict[str, bool] = {}
    for graph in graphs:
        for node in _nodes(graph):
            local = (node.domain, node.op_type) in functions
            by_domain[node.domain] = by_domain.get(node.domain, True) and local
    return {domain for domain, local in by_domain.items() if local}


def _nodes(graph: Any) -> Iterator[Any]:
    """Every node of a graph, those of its subgraphs (If, Loop, Scan) included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)


def check_op_types(model: Any, library_file: LibraryFile | None = None) -> None:
    """Raises if a node of a loaded library's domain has an op type that
    library lacks (ONNX Runtime itself would only say the op "is not a
    registered function/op"): names the library and its op types, and the one
    the node's may misspell. The node's op type comes last, escaped.

    Nodes that call the model's own functions are left alone. ``model`` is a
    path, bytes or a ``ModelProto``; ``library_file`` as for
    :func:`libraries_for`.
    """
    file_of = library_file or _ort_file
    proto = load_model(model)
    functions = {(function.domain, function.name) for function in proto.functions}
    graphs = [proto.graph, *proto.functions]
    known: dict[str, set[str]] = {}
    for graph in graphs:
        for node in _nodes(graph):
            library = library_for_domain(node.domain)
            if library is None or (node.domain, node.op_type) in functions:
                continue
            if library.onnx_domain not in known:
                specs = library.specs().values()
                known[library.onnx_domain] = {s["onnx_type"] for s in specs if s.get("onnx_type")}
            types = known[library.onnx_domain]
            if node.op_type in types:
                continue
            closest = _closest(node.op_type, types)
            hint = f"; did you mean '{closest}'?" if closest else "."
            which = f"node {node.name!a}" if node.name else "a node"
            op = f"{node.domain}:{node.op_type}"
            raise RuntimeError(
                f"{library.name}: the model's {which} has an op type that the operator library "
                f"{library.name} ({file_of(library).name}, ONNX domain "
                f"'{library.onnx_domain}') does not have; its op types: "
                f"{', '.join(sorted(types))}{hint} The node's op type: {op!a}"
            )


# ONNX Runtime's graph optimization levels, least to most, by opbridge's name
# for each; ORT_ENABLE_LAYOUT only exists in newer runtimes.
OPTIMIZATION_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "enable_basic": "ORT_ENABLE_BASIC",
    "enable_extended": "ORT_ENABLE_EXTENDED",
    "enable_layout": "ORT_ENABLE_LAYOUT",
    "enable_all": "ORT_ENABLE_ALL",
}


def available_levels() -> list[str]:
    """The optimization levels the installed ONNX Runtime has, least to most."""
    import onnxruntime

    members = onnxruntime.GraphOptimizationLevel.__members__
    return [name for name, enum in OPTIMIZATION_LEVELS.items() if enum in members]


def level_enum(name: str):
    """The ``onnxruntime.GraphOptimizationLevel`` of a level named as in
    :data:`OPTIMIZATION_LEVELS`; a ValueError naming the installed runtime's
    levels for any other name."""
    import onnxruntime

    known = available_levels()
    if name not in known:
        raise ValueError(
            f"opbridge.runtimes.onnxruntime: unknown optimization level {name!r}; expected one of "
            f"{known} "
            f"(onnxruntime {onnxruntime.__version__})"
        )
    return getattr(onnxruntime.GraphOptimizationLevel, OPTIMIZATION_LEVELS[name])


def InferenceSession(
    path_or_bytes: str | bytes | os.PathLike,
    sess_options: Any = None,
    providers: Any = None,
    provider_options: Any = None,
    *,
    optimization_level: str | None = None,
    threads: int | None = None,
    allow_wrong_forms: bool = False,
    **kwargs: Any,
):
    """An ``onnxruntime.InferenceSession`` with opbridge's library registered,
    and the library of every other custom domain the model uses.

    ``optimization_level`` names the graph optimization level (one of
    :func:`available_levels`: ``"disable_all"`` ... ``"enable_all"``);
    ``threads`` is the intra-op thread count, with one inter-op thread and
    sequential execution (a kernel's parallel-for gets ``threads`` workers).
    Either one left at None keeps ONNX Runtime's default, or the setting of
    ``sess_options`` when that is given.

    Takes ``onnxruntime.InferenceSession``'s arguments, in its order
    (``sess_options``, ``providers``, ``provider_options`` positionally or
    by name, the rest by name); ``sess_options``
    (if given) is the base: it gets the libraries added and the level and
    threads asked for here. A ``ModelProto`` is accepted too. A model ONNX
    Runtime cannot read (a truncated file, an IR version newer than the
    runtime's, a domain version the loaded library lacks, a domain no loaded
    library provides, an op type its library lacks) gets an error that says
    what to change. A model with a form ONNX Runtime's runtime lists as
    computed wrong (``RUNTIME.wrong_forms``, none today) is warned of
    (:class:`~opbridge.runtimes.WrongFormWarning`), or refused where its
    known error is large (:class:`~opbridge.runtimes.WrongFormError`);
    ``allow_wrong_forms=True`` runs it as given.
    """
    import onnxruntime

    level = level_enum(optimization_level) if optimization_level is not None else None
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(
            "opbridge.runtimes.onnxruntime.InferenceSession: threads must be an int >= 1 (or "
            "None for ONNX "
            f"Runtime's default), got {threads!r}"
        )
    if hasattr(path_or_bytes, "SerializeToString"):
        path_or_bytes = path_or_bytes.SerializeToString()
    elif isinstance(path_or_bytes, os.PathLike):
        path_or_bytes = os.fspath(path_or_bytes)
    proto = load_model(path_or_bytes)
    needed = libraries_for(proto)
    check_op_types(proto)
    RUNTIME.check_wrong_forms(proto, allow_wrong_forms=allow_wrong_forms)
    options = session_options(sess_options, needed)
    if level is not None:
        options.graph_optimization_level = level
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    kwargs["sess_options"] = options
    kwargs["providers"] = providers if providers is not None else ["CPUExecutionProvider"]
    if provider_options is not None:
        kwargs["provider_options"] = provider_options
    try:
        return onnxruntime.InferenceSession(path_or_bytes, **kwargs)
    except Exception as error:
        explained = _explain_load_error(error, path_or_bytes)
        if explained is None:
            raise
        raise explained from error


_IR_VERSION_ERROR = re.compile(
    r"Unsupported model IR version: (\d+), max supported IR version: (\d+)"
)


def _explain_load_error(error: Exception, model: Any) -> Exception | None:
    """An opbridge error for a load failure whose ONNX Runtime message does
    not say what to do; None for the others."""
    import onnx
    import onnxruntime

    match = _IR_VERSION_ERROR.search(str(error))
    if match:
        ir_version, supported = int(match.group(1)), int(match.group(2))
        source = f"model {model}" if isinstance(model, str) else "the model"
        return RuntimeError(
            f"opbridge: {source} has ONNX IR version {ir_version}, but onnxruntime "
            f"{onnxruntime.__version__} reads up to IR version {supported}. Set "
            f"model.ir_version = {supported} before saving it (or pass "
            f"ir_version={supported} to onnx.helper.make_model, which writes IR version "
            f"{onnx.IR_VERSION} with onnx {onnx.__version__}); that is valid when the model uses "
            "no feature of a newer IR version. Models from opbridge.export.export already have a "
            "version ONNX Runtime reads."
        )
    return None


def check_domain_version(model: Any, library_file: LibraryFile | None = None) -> None:
    """Raises if the model needs a version of a library domain the loaded
    library lacks: newer (by its opset imports and its
    ``opbridge.domain_version.<domain>`` metadata), or below 1.

    ONNX Runtime itself would only say the op "is not a registered
    function/op"; this names both versions. ``model`` is a path, bytes or a
    ``ModelProto``; ``library_file`` as for :func:`libraries_for`.
    """
    file_of = library_file or _ort_file
    proto = load_model(model)
    wanted = {opset.domain: opset.version for opset in proto.opset_import}
    for prop in proto.metadata_props:
        if prop.key.startswith(METADATA_DOMAIN_VERSION_PREFIX):
            domain = prop.key[len(METADATA_DOMAIN_VERSION_PREFIX) :]
            try:
                wanted[domain] = max(wanted.get(domain, 0), int(prop.value))
            except ValueError:
                continue
    for domain, version in wanted.items():
        library = library_for_domain(domain)
        if library is None:
            continue
        if version < 1:
            raise RuntimeError(
                f"{library.name}: the model imports ONNX domain '{domain}' version "
                f"{version}, but the domain's versions start at 1 (this library, "
                f"{library.name} {library.version}, has versions 1 to "
                f"{library.domain_version}); set that opset import's version to "
                f"{library.domain_version}"
            )
        if version <= library.domain_version:
            continue
        if library is BUILTIN:
            raise RuntimeError(
                f"opbridge: the model needs ONNX domain '{ONNX_DOMAIN}' version {version}, "
                f"but this library (opbridge {VERSION}, {file_of(BUILTIN)}) supports "
                f"version {ONNX_DOMAIN_VERSION}; upgrade opbridge"
            )
        raise RuntimeError(
            f"{library.name}: the model needs ONNX domain '{domain}' version {version}, but the "
            f"loaded library ({library.name} {library.version}, {file_of(library)}) "
            f"supports version {library.domain_version}; rebuild the model or upgrade the library"
        )


def _release(version: str) -> tuple[int, ...]:
    """ "1.24.1" -> (1, 24, 1); stops at the first part that is not a number."""
    parts = []
    for part in version.split("+")[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def ort_supported_range(module) -> tuple[str, str]:
    """The ONNX Runtime releases the built library supports, as the build says
    (kOrtApiFloor and kOrtNewestTested in csrc/opbridge/version.h): the floor
    ("1.24") and the newest release tested."""
    return f"1.{module.ORT_API_FLOOR}", module.ORT_NEWEST_TESTED


def ort_version_check(version: str, module) -> RuntimeCheck:
    """Whether an ONNX Runtime of this version can run the built library."""
    floor, newest = ort_supported_range(module)
    release = _release(version)
    ok = release[:2] >= _release(floor)
    if not ok:
        detail = f"onnxruntime {version} is older than {floor}: the library refuses it"
    elif release > _release(newest):
        detail = f"onnxruntime {version} (newer than the newest tested, {newest})"
    else:
        detail = f"onnxruntime {version}"
    return RuntimeCheck(
        f"ONNX Runtime is {floor} or newer (C API {module.ORT_API_FLOOR})", ok, detail
    )


def _checks() -> list[RuntimeCheck]:
    """The library's supported range against the installed runtime, and a
    one-node model run through the library."""
    import onnxruntime

    from opbridge._library import _C

    checks = [ort_version_check(onnxruntime.__version__, _C)]
    sessions = []

    def run(model, feeds):
        sessions.append(InferenceSession(model))
        return sessions[-1].run(None, feeds)

    # The sessions live until the check has seen what they mapped (doctor
    # lists the libraries loaded).
    checks.append(smoke_check("ONNX Runtime", run))
    return checks


def _session(model: Any, level: str | None = None, threads: int | None = None):
    return InferenceSession(model, optimization_level=level, threads=threads)


def _plain_session(model: Any, level: str | None = None):
    """A stock ``onnxruntime.InferenceSession`` (no library registered) at
    ``level`` (None: ONNX Runtime's default) on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if level is not None:
        options.graph_optimization_level = level_enum(level)
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def library_nodes(model: Any) -> list[Any]:
    """The nodes of the model's graph whose domain a loaded library provides."""
    return [node for node in load_model(model).graph.node if library_for_domain(node.domain)]


def library_kernels(model: Any, feeds: dict, level: str | None = None) -> set[str]:
    """The names of the model's library nodes (:func:`library_nodes`, each
    named) that ran as their library's kernel in one run on ``feeds`` of an
    :func:`InferenceSession` at ``level``, by ONNX Runtime's profiling: a
    kernel's event carries its node's name and op type, while a model-local
    function's body, inlined, shows the body's operators under names of
    their own."""
    import tempfile

    import onnxruntime

    proto = load_model(model)
    wanted = {node.name: node.op_type for node in library_nodes(proto) if node.name}
    with tempfile.TemporaryDirectory(prefix="opbridge-profile-") as directory:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(directory, "run")
        session = InferenceSession(proto, options, optimization_level=level)
        session.run(None, feeds)
        with open(session.end_profiling()) as file:
            events = json.load(file)
    ran = set()
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name.removesuffix("_kernel_time")
        if node in wanted and event.get("args", {}).get("op_name") == wanted[node]:
            ran.add(node)
    return ran


def _version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _facts() -> list[tuple[str, str]]:
    from opbridge._library import _C

    floor, newest = ort_supported_range(_C)
    return [
        ("ONNX Runtime", _version()),
        ("ONNX Runtime library", get_library_path()),
        ("supported ONNX Runtime", f"{floor} (oldest) to {newest} (newest tested)"),
    ]


# ---------------------------------------------------------------- for bench

# The standard-route export that the contrib rewrite starts from is made at
# this opset: the legacy exporter's highest, and the first with ai.onnx Gelu,
# which onnxscript's BiasGelu rule matches (at opset 18 bias_gelu is an
# Erf chain the rule does not match).
CONTRIB_OPSET = 20
# Matrix products, including convolutions (computed as matrix products).
MATMUL_OPS = frozenset(
    {"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulNBits", "Conv", "FusedConv", "NhwcConv"}
)


def contrib_rewrite(proto):
    """``proto`` (a standard-route export) rewritten by onnxscript's
    ``optimize_for_ort`` into ONNX Runtime's fused contrib operators where
    its rules match: the rewritten ``ModelProto`` and the rules' fusion
    counts (only those that fired)."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, counts = optimize_for_ort(ir.from_proto(proto))
    return ir.to_proto(model), {name: n for name, n in counts.items() if n}


def _bench_call(session, args: tuple) -> Callable[[], object]:
    """One call of the session on torch tensors ``args``. NumPy has no
    bfloat16, so such inputs go in through IO binding, as OrtValues over
    their bits, bound once; ONNX Runtime allocates the outputs on every
    call, as run() does."""
    import onnxruntime
    import torch
    from onnx import TensorProto

    if not any(a.dtype == torch.bfloat16 for a in args):
        return feeds_call(session, args)
    names = [meta.name for meta in session.get_inputs()]
    binding = session.io_binding()
    values = []  # the bound OrtValues (and the memory they view) live as long as the call
    for name, a in zip(names, args, strict=True):
        a = a.detach().contiguous()
        if a.dtype == torch.bfloat16:
            bits = a.view(torch.int16).numpy().view("uint16")
            value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                bits, TensorProto.BFLOAT16
            )
        else:
            value = onnxruntime.OrtValue.ortvalue_from_numpy(a.numpy())
        binding.bind_ortvalue_input(name, value)
        values.append(value)
    for meta in session.get_outputs():
        binding.bind_output(meta.name, "cpu")
    return lambda: (session.run_with_iobinding(binding), values)[0]


def _profile(model: bytes, feeds: dict, threads: int, calls: int, level: str) -> dict[str, float]:
    """Runs ``model`` once untimed, then ``calls`` times under ONNX Runtime's
    profiler: the node kernel time of each op type, in microseconds."""
    import onnxruntime

    with tempfile.TemporaryDirectory() as scratch:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(scratch, "ort")
        session = InferenceSession(
            model, optimization_level=level, threads=threads, sess_options=options
        )
        for _ in range(1 + calls):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    if len(runs) < 2:
        raise ValueError("ONNX Runtime's profile has no model_run after the first")
    times: dict[str, float] = {}
    for event in events:
        if (
            event.get("cat") == "Node"
            and event.get("name", "").endswith("_kernel_time")
            and event["ts"] >= runs[1]  # the first call is a warm-up
        ):
            op = event.get("args", {}).get("op_name", "?")
            times[op] = times.get(op, 0.0) + float(event.get("dur", 0))
    return times


RUNTIME = Runtime(
    name="onnxruntime",
    label="ONNX Runtime",
    short="ort",
    session=_session,
    levels=available_levels,
    base_level="disable_all",
    default_level="enable_all",
    version=_version,
    library_path=_path_of,
    plain_session=_plain_session,
    level_names=OPTIMIZATION_LEVELS,
    facts=_facts,
    checks=_checks,
    library_kernels=library_kernels,
    rewrites={
        "contrib": ModelRewrite(
            route="standard",
            opset=CONTRIB_OPSET,
            rewrite=contrib_rewrite,
            label=f"standard route (opset {CONTRIB_OPSET}, for ort_contrib)",
        )
    },
    bench_call=_bench_call,
    profile=_profile,
    matmul_ops=MATMUL_OPS,
)
