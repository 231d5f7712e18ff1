"""What a built PyTorch library needs of torch, read from the file: a
stable-ABI library (``lib<name>_torch_stable.so``) may use LibTorch's stable C
API only, the functions its C headers declare (``torch/csrc/stable/c`` and
``torch/csrc/inductor/aoti_torch``), so that one build loads under every torch
from its target on. A symbol of torch's C++ ABI (``at::``, ``c10::``,
``torch::``) would load under the torch it was built with only::

    from opbridge.sdk import abi

    assert not abi.stable_abi_violations(library.torch_adapter.available[-1])
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# Where torch's stable C API is declared, under its include folder.
STABLE_API_HEADERS = (
    "torch/csrc/stable/c",
    "torch/csrc/inductor/aoti_torch/c",
    "torch/csrc/inductor/aoti_torch/generated",
)


def _torch_dir() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent


def _symbols(path: Path, *flags: str) -> set[str]:
    listed = subprocess.run(
        ["nm", "-D", *flags, str(path)], capture_output=True, text=True, check=True
    ).stdout
    # "U name@VERSION" or "000... T name@@VERSION": the name, without its version.
    return {line.split()[-1].split("@")[0] for line in listed.splitlines() if line.split()}


def stable_api(torch_dir: Path | None = None) -> set[str]:
    """Every identifier of torch's stable C headers (functions, types, macros)."""
    include = (torch_dir or _torch_dir()) / "include"
    names: set[str] = set()
    for folder in STABLE_API_HEADERS:
        for header in sorted((include / folder).glob("*.h")):
            names.update(re.findall(r"\b[A-Za-z_]\w*\b", header.read_text(errors="replace")))
    if not names:
        raise FileNotFoundError(f"opbridge.sdk.abi: no stable C headers under {include}")
    return names


def _linked_elsewhere(library: Path, torch_dir: Path) -> set[str]:
    # What the libraries it links outside torch define (the C and C++
    # runtimes, OpenMP, Highway): torch's libraries define some of the C++
    # runtime's templates too, which are not torch's ABI.
    run = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True)
    defined: set[str] = set()
    for line in run.stdout.splitlines():
        # "libname.so => /path/libname.so (0x...)"
        found = line.split("=>")[1].split() if "=>" in line else []
        if not found:
            continue
        target = Path(found[0])
        # torch's own libraries, wherever the loader found them, are torch's.
        if target.name.startswith(("libtorch", "libc10")):
            continue
        if target.is_file() and torch_dir not in target.resolve().parents:
            defined |= _symbols(target, "--defined-only")
    return defined


def torch_symbols_used(library: Path, torch_dir: Path | None = None) -> set[str]:
    """The symbols ``library`` (and its kernels library beside it, where there
    is one) needs that torch's libraries define, and no other library it links."""
    torch_dir = torch_dir or _torch_dir()
    provided: set[str] = set()
    for shared in sorted((torch_dir / "lib").glob("lib*.so*")):
        provided |= _symbols(shared, "--defined-only")
    needed: set[str] = set()
    # A PyTorch library and its kernels (lib<name>_torch[_stable]_kernels.so).
    files = [Path(library), Path(library).with_name(Path(library).stem + "_kernels.so")]
    for path in (path for path in files if path.is_file()):
        used = _symbols(path, "--undefined-only") & provided
        needed |= used - _linked_elsewhere(path, torch_dir)
    return needed


def stable_abi_violations(library: Path, torch_dir: Path | None = None) -> list[str]:
    """The symbols of torch that ``library`` needs outside the stable C API,
    sorted (demangled where they are C++); empty for a library that loads
    under every torch from its target on."""
    outside = sorted(torch_symbols_used(library, torch_dir) - stable_api(torch_dir))
    if not outside:
        return []
    demangled = subprocess.run(
        ["c++filt"], input="\n".join(outside), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return demangled
