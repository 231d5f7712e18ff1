"""ExecuTorch: models with an operator library's ops lowered to an ExecuTorch
program (``.pte``) and run by ExecuTorch's runtime on the library's kernels.

Each library built with the ``executorch`` adapter (opbridge's own is, in
the wheel and in ``./dev``'s build) has ``lib<name>_executorch.so`` beside
its module: one kernel per spec for its ``out=`` form, which is what
ExecuTorch's memory planning lowers every op to. :func:`load_kernels`
registers them with the runtime of the executorch package in this process
(its pybindings module, whose kernel registry ``.pte`` programs loaded here
use); :func:`to_pte` lowers a model to a program.

    import opbridge
    from opbridge.deploy import executorch

    executorch.load_kernels()
    executorch.to_pte(model, (x,), "model.pte")
    (y,) = executorch.run_pte("model.pte", (x,))

A C++ host that links ExecuTorch's runtime loads the same library and calls
its ``opbridge_executorch_kernels()`` before it loads a program; the kernels
register at that first call. ExecuTorch's C++ ABI is not stable across
releases: a library registers only with the release it was built against
(``opbridge_executorch_built_with()``), which :func:`load_kernels` checks.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from opbridge._library import Library, libraries, library_for_namespace

_loaded: dict[str, tuple[ctypes.CDLL, list[str]]] = {}


def _runtime():
    try:
        from executorch.extension.pybindings import portable_lib
    except ImportError as error:
        raise RuntimeError(
            "opbridge.deploy.executorch needs the executorch package (pinned in "
            f"requirements-nodeps.txt, installed with --no-deps): {error}"
        ) from None
    return portable_lib


def _runtime_version() -> str:
    from executorch import version

    return version.__version__


def _library_of(library: Library | str | None) -> Library:
    loaded = libraries()
    if library is None:
        return loaded[0]
    if isinstance(library, Library):
        return library
    found = library_for_namespace(library) or next((c for c in loaded if c.name == library), None)
    if found is not None:
        return found
    names = ", ".join(candidate.name for candidate in loaded)
    raise ValueError(
        f"opbridge.deploy.executorch: no loaded library named '{library}' (loaded: {names})"
    )


def load_kernels(library: Library | str | None = None) -> list[str]:
    """Registers ``library``'s ExecuTorch kernels (opbridge's own by default;
    a :class:`~opbridge.Library`, or a loaded library's name or namespace)
    with the ExecuTorch runtime of this process and returns their names
    (``"opbridge::rms_norm.out"``, ...). A second call returns the same
    names. Fails naming the file when the library was built without the
    ExecuTorch adapter or against another executorch release (registering
    nothing), and with the runtime's reason when it refuses a kernel (a name
    another library registered)."""
    library = _library_of(library)
    if library.name in _loaded:
        return list(_loaded[library.name][1])
    runtime = _runtime()
    path = library.adapter_path("executorch")
    if not path.is_file():
        raise RuntimeError(
            f"opbridge.deploy.executorch: library '{library.name}' has no ExecuTorch kernels: "
            f"{path} not found (build it with the executorch adapter: ADAPTERS ... executorch in "
            "opbridge_add_operator_library, with the executorch package installed)"
        )
    handle = ctypes.CDLL(os.fspath(path))
    handle.opbridge_executorch_built_with.restype = ctypes.c_char_p
    handle.opbridge_executorch_kernels.restype = ctypes.c_char_p
    handle.opbridge_executorch_last_error.restype = ctypes.c_char_p
    built, running = handle.opbridge_executorch_built_with().decode(), _runtime_version()
    if built != running:
        raise RuntimeError(
            f"opbridge.deploy.executorch: {path.name} was built against executorch {built}, this "
            f"process runs executorch {running}: its kernels were not registered (ExecuTorch's C++ "
            "ABI differs between releases); rebuild the library against the executorch installed"
        )
    names = handle.opbridge_executorch_kernels().decode().split()
    if not names:
        error = handle.opbridge_executorch_last_error().decode()
        raise RuntimeError(
            f"opbridge.deploy.executorch: {path.name} registered no kernels: {error}"
        )
    missing = set(names) - set(runtime._get_operator_names())
    if missing:
        raise RuntimeError(
            f"opbridge.deploy.executorch: {path.name} registered into another ExecuTorch runtime "
            f"than the executorch package's ({runtime.__file__}): {sorted(missing)} are not in its "
            "registry"
        )
    _loaded[library.name] = (handle, names)
    return list(names)


def last_error(library: Library | str | None = None) -> str:
    """The message of the last kernel call of ``library`` that failed in the
    runtime (empty when none has): ExecuTorch reports only an error code, so
    the op, argument and shapes are kept here."""
    library = _library_of(library)
    if library.name not in _loaded:
        return ""
    return _loaded[library.name][0].opbridge_executorch_last_error().decode()


def to_pte(
    model: torch.nn.Module, args: tuple, path: str | os.PathLike, dynamic_shapes=None
) -> Path:
    """``torch.export`` of ``model`` on ``args`` (with ``dynamic_shapes``),
    lowered to an ExecuTorch program and written to ``path``. The library ops
    in it become their ``out=`` forms, run by :func:`load_kernels`'s
    kernels."""
    from executorch.exir import to_edge

    exported = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes)
    program = to_edge(exported).to_executorch()
    path = Path(path)
    path.write_bytes(program.buffer)
    return path


def run_pte(path: str | os.PathLike, inputs: tuple) -> list[torch.Tensor]:
    """Runs the program at ``path`` on ``inputs`` in this process's ExecuTorch
    runtime; its outputs. A kernel that fails raises RuntimeError with the
    library's message (:func:`last_error`) when it has one."""
    runtime = _runtime()
    method = runtime._load_for_executorch(os.fspath(path))
    try:
        return list(method.forward(tuple(inputs)))
    except RuntimeError as error:
        messages = [last_error(name) for name in _loaded]
        detail = "; ".join(message for message in messages if message)
        if detail:
            raise RuntimeError(f"{error}: {detail}") from None
        raise
