"""Just-in-time build of an operator library, for quick experiments:

    lib = opbridge.sdk.build.load("softcap", sources=["softcap.cpp"])

compiles the sources with the installed SDK into the libraries (the PyTorch
library and its Python extension module, the ONNX Runtime custom-op library),
caches the result under a
key made of the sources' content (and of the headers beside them, the
library's identity, opbridge's and torch's versions), and loads it with
:func:`opbridge.load_library`. A second call with unchanged sources loads the
cached build without compiling. For a package to ship, use a project with
``opbridge_add_operator_library`` (``opbridge new-op`` writes one).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from opbridge._library import (
    BUILTIN,
    VERSION,
    Library,
    cmake_prefix_path,
    load_library,
    native_dir,
)

_HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inl")


def cache_root() -> Path:
    """``$OPBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/opbridge``, else ``~/.cache/opbridge``."""
    if "OPBRIDGE_CACHE_DIR" in os.environ:
        return Path(os.environ["OPBRIDGE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opbridge"


@functools.cache
def _sdk_digest() -> str:
    """The installed SDK's headers, adapters and CMake package, by content: an
    opbridge rebuilt from changed sources under the same version (an editable
    install) builds the libraries that use it again."""
    digest = hashlib.sha256()
    for tree in (native_dir() / "sdk", Path(cmake_prefix_path())):
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _key(name: str, sources: list[Path], identity: list[str]) -> str:
    digest = hashlib.sha256()
    for part in [name, VERSION, _sdk_digest(), torch.__version__, sys.version, *identity]:
        digest.update(part.encode() + b"\0")
    headers = sorted(
        {p for s in sources for p in s.parent.iterdir() if p.suffix in _HEADER_SUFFIXES}
    )
    for path in [*sources, *headers]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _cmake_lists(name: str, sources: list[Path], args: dict) -> str:
    def quoted(values):
        return " ".join(f'"{v}"' for v in values)

    include_dirs = sorted({str(s.parent) for s in sources} | set(args["include_dirs"]))
    adapters = f"\n  ADAPTERS {' '.join(args['adapters'])}" if args["adapters"] else ""
    return f"""cmake_minimum_required(VERSION 3.25)
project({name} VERSION {args["version"]} LANGUAGES CXX)
list(APPEND CMAKE_PREFIX_PATH "{cmake_prefix_path()}")
find_package(opbridge CONFIG REQUIRED)
opbridge_add_operator_library(
  {name}
  SOURCES {quoted(str(s) for s in sources)}
  TORCH_NAMESPACE {args["torch_namespace"]}
  ONNX_DOMAIN {args["onnx_domain"]}
  DOMAIN_VERSION {args["domain_version"]}{adapters}
  INCLUDE_DIRECTORIES {quoted(include_dirs)})
"""


def _run(command: list[str], cwd: Path, verbose: bool, what: str) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=not verbose, text=True)
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        raise RuntimeError(f"opbridge.sdk.build.load: {what} failed (in {cwd}):\n{output[-6000:]}")


def load(
    name: str,
    sources: list[str | os.PathLike],
    *,
    torch_namespace: str | None = None,
    onnx_domain: str | None = None,
    domain_version: int = 1,
    version: str = "0.0.0",
    include_dirs: list[str | os.PathLike] = (),
    adapters: list[str] | None = None,
    build_directory: str | os.PathLike | None = None,
    verbose: bool = False,
) -> Library:
    """Builds (or reuses a cached build of) an operator library from
    ``sources`` and loads it; returns the :class:`opbridge.Library`.
    ``adapters``: the runtimes to build for (``opbridge_add_operator_library``'s
    ADAPTERS; default torch, ort and openvino where found; ``"executorch"``
    only when named)."""
    paths = [Path(s).resolve() for s in sources]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"opbridge.sdk.build.load: no such source file(s): {missing}")
    args = {
        "torch_namespace": torch_namespace or name,
        "onnx_domain": onnx_domain or name,
        "domain_version": int(domain_version),
        "version": version,
        "include_dirs": [str(Path(d).resolve()) for d in include_dirs],
        "adapters": list(adapters) if adapters is not None else [],
    }
    identity = [f"{k}={v}" for k, v in sorted(args.items())]
    # The SIMD targets left out (cmake/opbridge.cmake reads the variable).
    identity.append(f"hwy_disabled={os.environ.get('OPBRIDGE_HWY_DISABLED_TARGETS', '')}")
    # The PyTorch ABI the SDK builds on (opbridge's own: the stable ABI or not).
    identity.append(f"stable_abi={getattr(BUILTIN.module, 'STABLE_ABI', False)}")
    key = _key(name, paths, identity)
    root = Path(build_directory) if build_directory else cache_root() / "jit"
    directory = root / f"{name}-{key}"
    directory.mkdir(parents=True, exist_ok=True)
    module = f"{name}_torch"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted((directory / "build").glob(f"{module}*.so"))
        # A build from before the PyTorch library (lib<name>_torch.so) was
        # made beside the module is built again.
        if not built or not (directory / "build" / f"lib{name}_torch.so").is_file():
            (directory / "CMakeLists.txt").write_text(_cmake_lists(name, paths, args))
            ninja = shutil.which("ninja", path=f"{Path(sys.executable).parent}{os.pathsep}")
            ninja = ninja or shutil.which("ninja")
            generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
            _run(
                [
                    "cmake",
                    "-S",
                    ".",
                    "-B",
                    "build",
                    *generator,
                    f"-DPython3_EXECUTABLE={sys.executable}",
                    "-DCMAKE_BUILD_TYPE=Release",
                ],
                directory,
                verbose,
                "CMake configuration",
            )
            _run(["cmake", "--build", "build"], directory, verbose, "the build")
            built = sorted((directory / "build").glob(f"{module}*.so"))
        return load_library(built[0])
