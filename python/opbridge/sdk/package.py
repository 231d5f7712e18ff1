"""A user's operator project as a wheel another environment installs
(``opbridge package-op PROJECT``): built by ``pip wheel`` against this
opbridge's SDK, then read back to check that it carries what the library
needs where it will be installed::

    from opbridge.sdk import package

    wheel = package.build_wheel("examples/fused_norm", "dist")
    report = package.inspect_wheel(wheel)
    assert not report.problems, report.problems

:func:`inspect_wheel` reads each shared library of the wheel (its ELF
``DT_NEEDED`` and ``RUNPATH``) and names a problem when:

- a library needs one that the wheel does not carry, that is not the
  system's base (:data:`BASE_LIBRARIES`) and that no
  runtime package provides (torch's ``libtorch*``/``libc10*``/``libgomp``,
  OpenVINO's ``libopenvino*``);
- a ``RUNPATH`` names a folder of the build machine rather than one relative
  to the library (``$ORIGIN``);
- a PyTorch library lacks its kernels library, or the wheel has no PyTorch
  or no ONNX Runtime library;
- the wheel does not require the opbridge it was built with
  (``opbridge==VERSION``): its Python package imports opbridge, and its
  libraries link that SDK's code.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Shared libraries every Linux system has (glibc, the loader, the GCC C++
# runtime), the CUDA driver, and ONNX Runtime itself (the server's backend
# provides it): never copied into a repository. Matched on the soname up to
# ".so".
BASE_LIBRARIES = frozenset(
    {
        "linux-vdso",
        "linux-gate",
        "ld-linux",
        "ld-linux-x86-64",
        "ld-linux-aarch64",
        "libc",
        "libm",
        "libdl",
        "librt",
        "libpthread",
        "libutil",
        "libresolv",
        "libmvec",
        "libstdc++",
        "libgcc_s",
        "libcuda",
        "libonnxruntime",
    }
)

# The runtime libraries a library of the SDK builds, by file-name suffix
# (lib<name><suffix>), with the runtime each is for.
ROLES = {
    "_torch.so": "PyTorch (torch's C++ ABI: the torch it was built with)",
    "_torch_kernels.so": "PyTorch kernels (C++ ABI)",
    "_torch_stable.so": "PyTorch (stable C ABI: every other torch from 2.12 on)",
    "_torch_stable_kernels.so": "PyTorch kernels (stable C ABI)",
    "_ort.so": "ONNX Runtime",
    "_openvino.so": "OpenVINO",
    "_executorch.so": "ExecuTorch",
}
# Libraries a runtime's own package provides where the wheel is installed
# (its RUNPATH reaches them relative to the library), by soname prefix.
PROVIDED = {
    "libtorch": "torch",
    "libc10": "torch",
    "libgomp": "torch",
    "libshm": "torch",
    "libopenvino": "openvino",
    "libtbb": "openvino",
    "_portable_lib.": "executorch",
}


@dataclass(frozen=True)
class WheelLibrary:
    path: str
    """The file's path inside the wheel."""
    role: str
    """What it is: a runtime library of :data:`ROLES`, the extension module, or
    a bundled dependency."""
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


@dataclass
class WheelReport:
    wheel: Path
    libraries: list[WheelLibrary] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    """The wheel's ``Requires-Dist`` entries."""
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        """One line per shared library: its path, role and what it needs
        beyond the system's base."""
        width = max((len(lib.path) for lib in self.libraries), default=0)
        lines = []
        for lib in self.libraries:
            needs = [n for n in lib.needed if not is_base_library(n)]
            lines.append(f"  {lib.path:<{width}}  {lib.role}; needs {', '.join(needs) or '-'}")
        built = {lib.role for lib in self.libraries}
        absent = [role.split(" (")[0] for role in ROLES.values() if role not in built]
        if absent:
            lines.append(f"  not in the wheel: {', '.join(absent)}")
        return "\n".join(lines)


def is_base_library(soname: str) -> bool:
    """``soname`` (libc.so.6) is one of :data:`BASE_LIBRARIES`."""
    return soname.split(".so")[0] in BASE_LIBRARIES


def _provider(soname: str) -> str | None:
    return next((pkg for prefix, pkg in PROVIDED.items() if soname.startswith(prefix)), None)


def _dynamic_section(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(DT_NEEDED entries, RUNPATH or RPATH folders)`` of a shared library."""
    if shutil.which("readelf") is None:
        raise RuntimeError("opbridge package-op: cannot read shared libraries: no readelf on PATH")
    listed = subprocess.run(
        ["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    needed = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", listed))
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", listed)
    runpath = tuple(p for entry in paths for p in entry.split(":") if p)
    return needed, runpath


def _role(name: str, modules: set[str]) -> str:
    if name in modules:
        return "extension module (what Python imports)"
    for suffix, role in ROLES.items():
        if name.startswith("lib") and name.endswith(suffix):
            return role
    return "bundled dependency"


def _origin_relative(entry: str) -> str | None:
    """A RUNPATH entry's path below the library's own folder (``$ORIGIN/../x``
    gives ``../x``), or None for a folder of the build machine."""
    for origin in ("$ORIGIN", "${ORIGIN}"):
        if entry.startswith(origin):
            return entry.removeprefix(origin).lstrip("/")
    return None


def _reaches(runpath: tuple[str, ...], library: PurePosixPath, target: PurePosixPath) -> bool:
    """A folder of ``library``'s RUNPATH, relative to its own (``$ORIGIN``),
    is ``target``'s folder."""
    for entry in runpath:
        relative = _origin_relative(entry)
        if relative is not None:
            folder = PurePosixPath(os.path.normpath(str(library.parent / relative)))
            if folder == target.parent:
                return True
    return False


def inspect_wheel(wheel: str | os.PathLike, opbridge_version: str | None = None) -> WheelReport:
    """What the wheel carries (each shared library, its role and needs) and
    what it lacks to load where it is installed (:attr:`WheelReport.problems`,
    empty when nothing). ``opbridge_version``: the version it must require
    (default: this opbridge's)."""
    if opbridge_version is None:
        from opbridge._library import VERSION as opbridge_version
    wheel = Path(wheel)
    report = WheelReport(wheel)
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(wheel) as archive:
        names = [PurePosixPath(n) for n in archive.namelist()]
        metadata_file = next((n for n in names if n.match("*.dist-info/METADATA")), None)
        if metadata_file is None:
            report.problems.append(f"{wheel.name}: no .dist-info/METADATA: not a wheel")
            return report
        fields = email.parser.Parser().parsestr(archive.read(str(metadata_file)).decode())
        report.requires = fields.get_all("Requires-Dist") or []
        shared = [n for n in names if n.suffix == ".so" or ".so." in n.name]
        modules = {n.name for n in shared if re.search(r"\.cpython-[^.]+-.+\.so$", n.name)}
        carried = set(shared)
        for name in shared:
            archive.extract(str(name), scratch)
            needed, runpath = _dynamic_section(Path(scratch) / name)
            report.libraries.append(
                WheelLibrary(str(name), _role(name.name, modules), needed, runpath)
            )
            for entry in runpath:
                if _origin_relative(entry) is None:
                    report.problems.append(
                        f"{name}: its RUNPATH names {entry}, a folder of the build machine "
                        "(expected folders relative to $ORIGIN only)"
                    )
            for soname in needed:
                if is_base_library(soname) or _provider(soname):
                    continue
                beside = [c for c in carried if c.name == soname and _reaches(runpath, name, c)]
                if not beside:
                    report.problems.append(
                        f"{name} needs {soname}, which the wheel does not carry where its "
                        f"RUNPATH ({':'.join(runpath) or 'none'}) looks and no runtime provides"
                    )
    _check_roles(report)
    _check_requires(report, opbridge_version)
    return report


def _check_roles(report: WheelReport) -> None:
    files = {PurePosixPath(lib.path).name for lib in report.libraries}
    if not any(n.startswith("lib") and n.endswith("_torch.so") for n in files):
        report.problems.append(f"{report.wheel.name}: no PyTorch library (lib<name>_torch.so)")
    if not any(n.startswith("lib") and n.endswith("_ort.so") for n in files):
        report.problems.append(f"{report.wheel.name}: no ONNX Runtime library (lib<name>_ort.so)")
    for name in sorted(files):
        for suffix in ("_torch.so", "_torch_stable.so"):
            if name.startswith("lib") and name.endswith(suffix):
                kernels = name.removesuffix(".so") + "_kernels.so"
                if kernels not in files:
                    report.problems.append(f"{name} without its kernels library {kernels}")


def _check_requires(report: WheelReport, version: str) -> None:
    pins = [r for r in report.requires if re.match(r"opbridge\s*[=<>!~(]", r) or r == "opbridge"]
    if not any(re.fullmatch(rf"opbridge\s*\(?==\s*{re.escape(version)}\)?", p) for p in pins):
        if report.wheel.name.startswith("opbridge-"):
            return  # opbridge's own wheel
        report.problems.append(
            f"{report.wheel.name} requires {pins or 'no opbridge'}, not the opbridge it was built "
            f'with: add "opbridge=={version}" to [project] dependencies in pyproject.toml'
        )


def build_wheel(
    project: str | os.PathLike,
    out: str | os.PathLike,
    *,
    build_dir: str | os.PathLike | None = None,
    settings: Iterable[str] = (),
    verbose: bool = False,
) -> Path:
    """``pip wheel`` of the project (no build isolation: against the torch
    and this opbridge installed here, whose SDK the build uses); returns the
    wheel written to ``out``. ``settings``: more of pip's ``-C KEY=VALUE``
    (``cmake.define.NAME=VALUE``)."""
    from opbridge._library import cmake_prefix_path

    project, out = Path(project), Path(out)
    if not (project / "pyproject.toml").is_file():
        raise FileNotFoundError(f"opbridge package-op: {project} has no pyproject.toml")
    out.mkdir(parents=True, exist_ok=True)
    sdk = Path(cmake_prefix_path()) / "opbridge"
    command = [
        sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
        str(project), "-w", str(out), f"-Ccmake.define.opbridge_DIR={sdk}",
    ]  # fmt: skip
    if build_dir is not None:
        command.append(f"-Cbuild-dir={build_dir}")
    command += [f"-C{setting}" for setting in settings]
    if not verbose:
        command.append("-q")
    result = subprocess.run(command, capture_output=not verbose, text=True)
    if result.returncode != 0:
        tail = "\n".join(((result.stdout or "") + (result.stderr or "")).splitlines()[-40:])
        raise RuntimeError(f"opbridge package-op: pip wheel {project} failed:\n{tail}")
    # The project's wheel: its distribution name as wheel file names spell it.
    with open(project / "pyproject.toml", "rb") as file:
        name = tomllib.load(file).get("project", {}).get("name", "")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    written = [w for w in out.glob("*.whl") if w.name.lower().startswith(f"{stem}-")]
    if not written:
        raise RuntimeError(f"opbridge package-op: pip wheel wrote no {stem}-*.whl into {out}")
    return max(written, key=lambda p: p.stat().st_mtime)
