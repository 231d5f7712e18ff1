"""ONNX Runtime with opbridge's custom-op libraries registered.

``InferenceSession`` is a subclass of ``onnxruntime.InferenceSession``, made
when first used (opbridge does not import onnxruntime when it is imported):
ONNX Runtime's arguments and exceptions, the libraries a model needs
registered into the caller's ``SessionOptions`` once, and opbridge's
``optimization_level=``, ``threads=`` and ``allow_wrong_forms=`` for one
session. Its own docstring, and the guide "Your own tools", say the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from opbridge._library import BUILTIN, Library, library_nodes
from opbridge.runtimes.base import (
    BenchHooks,
    ModelRewrite,
    Runtime,
    RuntimeCheck,
    check_threads,
    feeds_call,
    load_model,
    smoke_check,
)
from opbridge.runtimes.model import ModelFacts, check_domain_version

# IO binding (run repeatedly without copies), re-exported: opbridge.runtimes.onnxruntime.bind.
from opbridge.runtimes.ort_binding import BoundSession as BoundSession
from opbridge.runtimes.ort_binding import bind as bind


def get_library_path(library: Library | None = None) -> str:
    """Absolute path of an ONNX Runtime custom-op library: opbridge's own
    (domain ``opbridge``) by default, or that of a loaded ``library``."""
    return RUNTIME.library_path(library or BUILTIN)


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
    """``onnxruntime.SessionOptions`` with the custom-op libraries registered:
    opbridge's own by default, else ``libraries``; a new one, or
    ``options``, into which ONNX Runtime's own registration
    (``register_custom_ops_library``) adds each library's domain once (an
    opbridge library registered again into the same options adds nothing,
    whoever registered it first)."""
    import onnxruntime

    options = options if options is not None else onnxruntime.SessionOptions()
    with _REGISTERING:
        for library in libraries if libraries is not None else [BUILTIN]:
            # The built-in's path through the module's function, which a test replaces.
            path = get_library_path() if library is BUILTIN else get_library_path(library)
            try:
                options.register_custom_ops_library(path)
            except Exception as error:
                raise RuntimeError(
                    f"{library.name}: ONNX Runtime {onnxruntime.__version__} could not load "
                    f"{path}: {error}"
                ) from error
    return options


# ONNX Runtime's SessionOptions are not safe to change from two threads at
# once: registrations into one shared by threads take turns.
_REGISTERING = threading.Lock()


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


# opbridge's settings of a session, on top of the caller's options: the
# option each sets, by name.
_LEVEL_AND_THREADS = (
    "graph_optimization_level",
    "intra_op_num_threads",
    "inter_op_num_threads",
    "execution_mode",
)


@contextlib.contextmanager
def _settings_on(options: Any, level: Any, threads: int | None, *, shared: bool) -> Iterator[None]:
    """``options`` with the level and threads asked for while a session is
    made from them (ONNX Runtime copies the options into the session), and
    as they were afterwards: the caller's object is left as given."""
    import onnxruntime

    if level is None and threads is None:
        yield
        return
    # One session at a time sets and restores the caller's options (``shared``):
    # two threads sharing them must not restore each other's settings.
    with _SETTING if shared else contextlib.nullcontext():
        saved = {name: getattr(options, name) for name in _LEVEL_AND_THREADS}
        try:
            if level is not None:
                options.graph_optimization_level = level
            if threads is not None:
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
            yield
        finally:
            for name, value in saved.items():
                setattr(options, name, value)


_SETTING = threading.Lock()


_EXPLAINED: dict[tuple[type, type], type] = {}


def _explained_class(runtime_class: type, opbridge_class: type) -> type:
    """ONNX Runtime's exception class with the class of opbridge's
    explanation beside it (``except onnxruntime...InvalidGraph`` and
    ``except RuntimeError`` both catch it), made once per pair."""
    key = (runtime_class, opbridge_class)
    if key not in _EXPLAINED:
        bases = (runtime_class,) if issubclass(runtime_class, opbridge_class) else key
        _EXPLAINED[key] = type(
            runtime_class.__name__,
            bases,
            {
                "__module__": __name__,
                "__doc__": f"ONNX Runtime's {runtime_class.__name__}, with opbridge's "
                "explanation of it as the message (ONNX Runtime's own is the cause).",
            },
        )
    return _EXPLAINED[key]


# How ONNX Runtime says that no schema it knows matches a node (a NUL in a
# domain cuts its message after "Fatal error:"): only then is a domain that
# no loaded opbridge library provides the reason (the caller may have
# registered that domain's library itself).
_UNREGISTERED_NODE = ("is not a registered function/op", "Fatal error:")


def _explain(error: Exception, facts: ModelFacts) -> Exception | None:
    """ONNX Runtime's failure to make a session of a model, as an error of
    the same class whose message says what to change (the model as
    opbridge reads it, its domains, versions and op types, its IR version);
    None where opbridge has nothing to add."""
    text = str(error)
    unregistered = any(sign in text for sign in _UNREGISTERED_NODE)
    why = facts.explain(unknown_domains=unregistered) or _ir_version_error(error, facts.model)
    if why is None:
        return None
    return _explained_class(type(error), type(why))(str(why))


def _check_domain_versions(proto: Any) -> None:
    """Refuses a model that needs a newer version of a loaded library's domain
    than the library has: ONNX Runtime would run each node by the older
    version's kernel (it resolves a custom op from version 1 whatever the
    model imports), a silent change of the numbers. The error is ONNX
    Runtime's ``Fail`` (and a ``RuntimeError``)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    try:
        check_domain_version(proto)
    except RuntimeError as error:
        raise _explained_class(Fail, RuntimeError)(str(error)) from None


def _session_class():
    """The class :data:`InferenceSession` names, made on first use
    (onnxruntime is imported then, not with opbridge)."""
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Stock

    class InferenceSession(Stock):
        """ONNX Runtime's ``InferenceSession`` with opbridge's custom-op
        library registered, and the library of every other loaded operator
        library whose domain the model uses.

        A subclass of ``onnxruntime.InferenceSession`` that takes its
        arguments, in its order, and behaves as it does: ``isinstance``,
        subclassing and ``onnxruntime.InferenceSession =
        opbridge.runtimes.onnxruntime.InferenceSession`` all work. The
        model may also be a ``ModelProto``.

        - ``sess_options``: the caller's ``SessionOptions`` (or a new one).
          The libraries the model needs are registered into them the way
          ONNX Runtime registers any (``register_custom_ops_library``); an
          opbridge library adds its domain to one options object once, so
          the options can be reused for any number of sessions, from any
          number of threads, after the caller registered the library too,
          and after a failed session. Nothing else of them changes.
        - ``providers``, ``provider_options`` and every other keyword are
          ONNX Runtime's, passed on as given (``providers=None``: ONNX
          Runtime's choice, or the options' provider selection policy).
        - Domains no loaded opbridge library provides are left to ONNX
          Runtime (a library the caller registered in ``sess_options``).
        - A model ONNX Runtime cannot load gets ONNX Runtime's exception,
          of ONNX Runtime's class, with a message that says what to change
          where opbridge can say it (an IR version newer than the
          runtime's, an op type the loaded library lacks, a domain no
          loaded library provides, a truncated file):
          the class is a subclass of ONNX Runtime's and of the error
          opbridge would raise (``RuntimeError``, ``ValueError``), and
          ONNX Runtime's own error is its ``__cause__``.

        opbridge's own keywords:

        - ``optimization_level`` names the graph optimization level (one of
          :func:`available_levels`: ``"disable_all"`` ... ``"enable_all"``);
          ``threads`` is the intra-op thread count, with one inter-op
          thread and sequential execution (a kernel's parallel-for gets
          ``threads`` workers). Either one left at None keeps the options'
          setting. They apply to this session only: the caller's
          ``sess_options`` are as given afterwards.
        - A model that needs a newer version of a loaded library's domain
          than the library has is refused before ONNX Runtime would run it
          by the older kernel (ONNX Runtime's ``Fail``, and a
          ``RuntimeError``).
        - A model with a form ONNX Runtime is listed as computing wrong
          (``RUNTIME.wrong_forms``, none today) is warned of
          (:class:`~opbridge.runtimes.WrongFormWarning`), or refused where
          its known error is large (:class:`~opbridge.runtimes.WrongFormError`);
          ``allow_wrong_forms=True`` runs it as given.
        """

        def __init__(
            self,
            path_or_bytes: str | bytes | os.PathLike,
            sess_options: Any = None,
            providers: Any = None,
            provider_options: Any = None,
            *,
            optimization_level: str | None = None,
            threads: int | None = None,
            allow_wrong_forms: bool = False,
            **kwargs: Any,
        ) -> None:
            import onnxruntime

            level = level_enum(optimization_level) if optimization_level is not None else None
            check_threads(threads, "opbridge.runtimes.onnxruntime.InferenceSession", "ONNX Runtime")
            if hasattr(path_or_bytes, "SerializeToString"):
                path_or_bytes = path_or_bytes.SerializeToString()
            facts = ModelFacts.of(path_or_bytes)
            if facts.proto is not None:
                _check_domain_versions(facts.proto)
                RUNTIME.check_wrong_forms(facts.proto, allow_wrong_forms=allow_wrong_forms)
            options = sess_options if sess_options is not None else onnxruntime.SessionOptions()
            session_options(options, facts.libraries)
            try:
                with _settings_on(options, level, threads, shared=sess_options is not None):
                    super().__init__(path_or_bytes, options, providers, provider_options, **kwargs)
            except Exception as error:
                explained = _explain(error, facts)
                if explained is None:
                    raise
                raise explained from error

    InferenceSession.__module__ = __name__
    InferenceSession.__qualname__ = "InferenceSession"
    return InferenceSession


_CLASSES: dict[str, Any] = {}
_CLASSES_LOCK = threading.Lock()


def __getattr__(name: str) -> Any:
    # InferenceSession is made on first use: it subclasses onnxruntime's,
    # and opbridge does not import onnxruntime when it is imported.
    if name == "InferenceSession":
        with _CLASSES_LOCK:
            if name not in _CLASSES:
                _CLASSES[name] = _session_class()
            return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _session_type() -> Any:
    """:data:`InferenceSession`, for this module's own calls (a module's
    ``__getattr__`` answers only lookups from outside)."""
    return __getattr__("InferenceSession")


_IR_VERSION_ERROR = re.compile(
    r"Unsupported model IR version: (\d+), max supported IR version: (\d+)"
)


def _ir_version_error(error: Exception, model: Any) -> Exception | None:
    """What to do about a model of an IR version newer than the runtime
    reads; None for any other failure."""
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

    checks = [ort_version_check(onnxruntime.__version__, BUILTIN.module)]
    sessions = []

    def run(model, feeds):
        sessions.append(_session_type()(model))
        return sessions[-1].run(None, feeds)

    # The sessions live until the check has seen what they mapped (doctor
    # lists the libraries loaded).
    checks.append(smoke_check("ONNX Runtime", run))
    return checks


def _session(model: Any, level: str | None = None, threads: int | None = None):
    return _session_type()(model, optimization_level=level, threads=threads)


def _plain_session(model: Any, level: str | None = None):
    """A stock ``onnxruntime.InferenceSession`` (no library registered) at
    ``level`` (None: ONNX Runtime's default) on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if level is not None:
        options.graph_optimization_level = level_enum(level)
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    # ONNX Runtime's own class, whatever onnxruntime.InferenceSession names now.
    stock = onnxruntime.capi.onnxruntime_inference_collection.InferenceSession
    return stock(model, options, providers=["CPUExecutionProvider"])


def library_kernels(model: Any, feeds: dict, level: str | None = None) -> set[str]:
    """The names of the model's library nodes
    (:func:`~opbridge._library.library_nodes`, each named) that ran as their
    library's kernel in one run on ``feeds`` of an
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
        session = _session_type()(proto, options, optimization_level=level)
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
    floor, newest = ort_supported_range(BUILTIN.module)
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
        session = _session_type()(
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
    adapter="ort",
    plain_session=_plain_session,
    level_names=OPTIMIZATION_LEVELS,
    facts=_facts,
    checks=_checks,
    library_kernels=library_kernels,
    bench=BenchHooks(
        rewrites={
            "contrib": ModelRewrite(
                route="standard",
                opset=CONTRIB_OPSET,
                rewrite=contrib_rewrite,
                label=f"standard route (opset {CONTRIB_OPSET}, for ort_contrib)",
            )
        },
        call=_bench_call,
        profile=_profile,
        matmul_ops=MATMUL_OPS,
    ),
)
