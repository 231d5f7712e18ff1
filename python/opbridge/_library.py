"""Operator libraries: opbridge's own (``opbridge._C``, loaded on import) and
any a user builds with the SDK and loads with :func:`load_library`.

A library is a Python extension module made by CMake's
``opbridge_add_operator_library``; beside it lie its PyTorch library
(``lib<name>_torch.so``: the kernels and registrations, no Python; the module
loads it, and a C++ host that links libtorch can too) and its ONNX Runtime
custom-op library for its ONNX domain. Importing the module registers nothing: loading
it here checks that its namespace, ONNX domain and operators are free, then
registers its operators with PyTorch (``torch.ops.<namespace>.*``), so that a
refused library leaves no operator behind. (A library built by an SDK older
than this registered its operators when imported; it still loads, with the
checks after the fact.)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from opbridge import _stable

_PACKAGE_DIR = Path(__file__).resolve().parent


def _load():
    # The native extension by name: a compiled module, not one of the
    # package's Python modules (the import check reads those).
    try:
        _C = importlib.import_module("opbridge._C")
    except ImportError as error:
        candidates = sorted(str(p) for p in _PACKAGE_DIR.glob("_C*.so"))
        raise ImportError(
            "opbridge: could not load the native extension opbridge._C "
            f"(looked in {_PACKAGE_DIR}, found {candidates or 'no _C*.so'}): {error}. "
            "Rebuild it with `pip install --no-build-isolation -e .` against "
            f"torch {torch.__version__}."
        ) from error
    return _C


def _describe(library: Library) -> str:
    return f"library {library.name!r} ({library.path})"


def _register(library: Library, loaded: list[Library]) -> None:
    """Registers ``library``'s operators with PyTorch after checking that no
    library of ``loaded`` (nor anything else) holds its namespace, ONNX domain
    or operators; refused with nothing registered otherwise."""
    module = library.module
    refused = f"opbridge.load_library: refused {_describe(library)}"
    nothing = "; none of its operators was registered"
    ops = {f"{library.torch_namespace}::{name}" for name in library.specs()}
    for other in loaded:
        if other.torch_namespace == library.torch_namespace:
            shared = sorted(ops & {f"{other.torch_namespace}::{n}" for n in other.specs()})
            held = f" (and its operators {', '.join(shared)})" if shared else ""
            raise ValueError(
                f"{refused}: torch namespace {library.torch_namespace!r}{held} is already held by "
                f"{_describe(other)}{nothing}"
            )
        if other.onnx_domain == library.onnx_domain:
            raise ValueError(
                f"{refused}: ONNX domain {library.onnx_domain!r} is already held by "
                f"{_describe(other)}{nothing}"
            )
    stable = module.STABLE_ABI
    # Registered already by the library itself: its lib<name>_torch.so was
    # loaded first (torch.ops.load_library, a host), which registers them.
    if module.operators_registered():
        taken = []
    elif stable:
        taken = _stable.taken_elsewhere(library.torch_namespace, library.specs())
    else:
        taken = module.operators_taken_elsewhere()
    if taken:
        raise ValueError(
            f"{refused}: PyTorch already has {', '.join(taken)}, registered outside opbridge's "
            f"libraries (torch.library or another extension){nothing}"
        )
    try:
        module.register_operators()
    except RuntimeError as error:
        raise ValueError(f"{refused}: {error}{nothing}") from error
    if stable:
        _stable.register(module, library.torch_namespace, library.specs())


_C = _load()

VERSION: str = _C.__version__
# Exported models record the version of every library domain they use under
# this prefix + the domain ("opbridge.domain_version.com.example.myops").
METADATA_DOMAIN_VERSION_PREFIX = "opbridge.domain_version."
ONNX_DOMAIN: str = _C.ONNX_DOMAIN
ONNX_DOMAIN_VERSION: int = _C.ONNX_DOMAIN_VERSION


@dataclass(frozen=True)
class TorchAdapter:
    """The PyTorch library an operator library runs on (:attr:`Library.torch_adapter`)."""

    kind: str
    """``"default"`` (the build's torch, torch's C++ ABI) or ``"stable"``
    (LibTorch's stable C ABI, every torch from the build's target on)."""
    library: Path
    """The PyTorch library for a host to load, link or ``torch.ops.load_library``
    (loading it registers the operators)."""
    kernels: Path
    """What the extension module loaded: the kernels and registrations,
    which ``library`` needs (``lib<name>_torch[_stable]_kernels.so``)."""
    reason: str
    """Why this one: the running torch against the build's, or ``OPBRIDGE_TORCH_ADAPTER``."""
    built_with: str
    """The torch the library was built against."""
    available: tuple[Path, ...]
    """Every PyTorch library built beside the module, the default-ABI one first."""


@dataclass(frozen=True)
class Library:
    """One loaded operator library."""

    name: str
    torch_namespace: str
    onnx_domain: str
    domain_version: int
    version: str
    module: ModuleType

    @property
    def path(self) -> Path:
        """The extension module's file."""
        return Path(self.module.__file__).resolve()

    @property
    def torch_library_path(self) -> Path:
        """The PyTorch library for this torch (beside the module;
        :attr:`torch_adapter` says which and why): the operators' kernels and
        registrations without Python, for ``torch.ops.load_library`` and C++
        hosts that link libtorch. Loading it registers the operators
        (``opbridge_register_torch_operators()`` gives an error as a value)."""
        return self.path.parent / self.module.TORCH_LIBRARY

    @property
    def torch_adapter(self) -> TorchAdapter:
        """Which PyTorch library the module loaded and why: the default-ABI one
        under the torch it was built with, the stable-ABI one under another
        (see docs/guides/pytorch-native.md)."""
        module = self.module
        return TorchAdapter(
            kind=module.TORCH_ADAPTER,
            library=self.torch_library_path,
            kernels=self.path.parent / module.TORCH_KERNELS_LIBRARY,
            reason=module.TORCH_ADAPTER_REASON,
            built_with=module.BUILD_TORCH_VERSION,
            available=tuple(self.path.parent / name for name in module.TORCH_LIBRARIES),
        )

    def adapter_path(self, adapter: str) -> Path:
        """The library of one of its runtime adapters, beside the module:
        ``lib<name>_<adapter>.so`` (``"openvino"``, ``"executorch"``, a user's
        adapter), or for ``"ort"`` the ONNX Runtime custom-op library, whose
        file name the build may choose (``ORT_LIBRARY_NAME``). A runtime's
        entry in the registry names its adapter; the file exists only where that
        adapter was built."""
        if adapter == "ort":
            return self.path.parent / self.module.ORT_LIBRARY
        return self.path.parent / f"lib{self.name}_{adapter}.so"

    def specs(self) -> dict[str, dict]:
        """Every operator's spec (from the C++ definition), keyed by op name."""
        return {spec["name"]: spec for spec in self.module.specs()}

    def op(self, name: str):
        """``torch.ops.<namespace>.<name>.default``."""
        return getattr(getattr(torch.ops, self.torch_namespace), name).default


def _library_of(module: ModuleType) -> Library:
    missing = [
        attr
        for attr in (
            "TORCH_NAMESPACE",
            "ONNX_DOMAIN",
            "ONNX_DOMAIN_VERSION",
            "ORT_LIBRARY",
            "specs",
        )
        if not hasattr(module, attr)
    ]
    if missing:
        raise ImportError(
            f"opbridge: {getattr(module, '__file__', module)} is not an opbridge operator library "
            f"(it lacks {', '.join(missing)}); build it with opbridge_add_operator_library"
        )
    return Library(
        name=module.LIBRARY_NAME,
        torch_namespace=module.TORCH_NAMESPACE,
        onnx_domain=module.ONNX_DOMAIN,
        domain_version=int(module.ONNX_DOMAIN_VERSION),
        version=module.__version__,
        module=module,
    )


# opbridge's own library, loaded and its operators registered: the first of the
# import-time effects the package's docstring lists.
BUILTIN = _library_of(_C)
_register(BUILTIN, [])
_LIBRARIES: dict[str, Library] = {BUILTIN.torch_namespace: BUILTIN}
_LOCK = threading.Lock()


def _find_module_file(path: Path) -> Path:
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(p for p in path.glob("*_torch*.so")) or sorted(path.glob("*.so"))
        found = [p for p in found if not p.name.startswith("lib")]
        if len(found) == 1:
            return found[0]
        raise FileNotFoundError(
            f"opbridge.load_library: expected one operator library module in {path}, "
            f"found {[p.name for p in found] or 'none'}"
        )
    raise FileNotFoundError(f"opbridge.load_library: {path} does not exist")


def load_library(library: str | os.PathLike | ModuleType) -> Library:
    """Loads an operator library built with the opbridge SDK.

    ``library`` is the path of its extension module (``<name>_torch*.so``),
    a folder holding one, or the imported module itself. Its operators become
    ``torch.ops.<namespace>.*``; its ONNX Runtime library is recorded for
    :func:`opbridge.runtimes.onnxruntime.InferenceSession`, which registers it for every model
    that imports its domain. Loading the same library again returns it.
    Another library with the same namespace or domain, or one with an
    operator PyTorch already has, is refused with a ``ValueError`` naming
    both, before any of its operators is registered.
    """
    with _LOCK:
        if isinstance(library, ModuleType):
            module = library
        else:
            file = _find_module_file(Path(library).resolve())
            module_name = file.name.split(".")[0]
            known = sys.modules.get(module_name)
            if known is not None and Path(getattr(known, "__file__", "")).resolve() == file:
                module = known
            else:
                if known is not None:
                    raise ImportError(
                        f"opbridge.load_library: a module named {module_name!r} is already loaded "
                        f"from {known.__file__}; cannot load {file} too"
                    )
                spec = importlib.util.spec_from_file_location(module_name, file)
                if spec is None or spec.loader is None:
                    raise ImportError(
                        f"opbridge.load_library: {file} is not a Python extension module"
                    )
                module = importlib.util.module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except ImportError as error:
                    raise ImportError(
                        f"opbridge.load_library: could not load {file}: {error}. Was it built "
                        f"against this torch ({torch.__version__})?"
                    ) from error
                sys.modules[module_name] = module
        loaded = _library_of(module)
        for other in _LIBRARIES.values():
            if other.module is module:
                return other
        _register(loaded, list(_LIBRARIES.values()))
        _LIBRARIES[loaded.torch_namespace] = loaded
        for hook in ON_LOAD:
            hook(loaded)
        return loaded


# Called with every library load_library takes, once its operators are
# registered (opbridge.ops.sharding's: the strategies of cards registered
# before their library was loaded).
ON_LOAD: list = []


def simd_targets() -> list[str]:
    """The SIMD targets opbridge's own kernels were compiled for that this
    CPU runs (Highway's names: ``"AVX2"``, ``"SSE4"``, ...)."""
    return list(_C.simd_targets())


def simd_target() -> str:
    """The SIMD target opbridge's own kernels run now."""
    return _C.simd_target()


def set_simd_target(name: str) -> None:
    """Makes opbridge's own kernels run the SIMD target ``name`` (one of
    :func:`simd_targets`; ``""``: the best this CPU has), for bench."""
    _C.set_simd_target(name)


def libraries() -> list[Library]:
    """Every loaded operator library, opbridge's own first."""
    return list(_LIBRARIES.values())


def library_for_domain(domain: str) -> Library | None:
    for loaded in _LIBRARIES.values():
        if loaded.onnx_domain == domain:
            return loaded
    return None


def library_nodes(model, among: list | None = None) -> list:
    """The nodes of ``model``'s graph (an ``onnx.ModelProto``) in the domain
    of one of the libraries ``among`` (default: every loaded library)."""
    domains = {library.onnx_domain for library in (libraries() if among is None else among)}
    return [node for node in model.graph.node if node.domain in domains]


def library_for_namespace(namespace: str) -> Library | None:
    return _LIBRARIES.get(namespace)


def specs() -> dict[str, dict]:
    """Every built-in operator's spec (from the C++ definition), keyed by op name."""
    return BUILTIN.specs()


def native_dir() -> Path:
    """The folder holding _C, libopbridge_torch.so, libopbridge_ort.so and
    libopbridge_openvino.so."""
    return Path(_C.__file__).resolve().parent


def cmake_prefix_path() -> str:
    """What to put on ``CMAKE_PREFIX_PATH`` for ``find_package(opbridge CONFIG)``
    (as ``torch.utils.cmake_prefix_path``)."""
    path = native_dir() / "share" / "cmake"
    if not (path / "opbridge" / "opbridgeConfig.cmake").is_file():
        raise FileNotFoundError(
            f"opbridge: the CMake package is missing from {path}; reinstall opbridge"
        )
    return str(path)
