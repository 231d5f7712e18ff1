"""``opbridge package --triton``: a Triton Inference Server model repository
for an ONNX model with opbridge nodes.

Writes ``REPO/<name>/config.pbtxt``, ``REPO/<name>/1/model.onnx`` and, beside
the model, every custom-op library the model needs (``libopbridge_ort.so``
and the libraries of other loaded operator libraries whose domains it
uses), named in ``model_operations { op_library_filename }`` so that
Triton's ONNX Runtime backend registers them before it loads the model.
Beside them go the shared libraries those need that are not part of the
system's base (:data:`opbridge.sdk.package.BASE_LIBRARIES`; Highway's ``libhwy.so.1`` in a
build against a shared Highway), found by ``ldd``: the op libraries'
RUNPATH (``$ORIGIN``) finds them there, on a server that lacks them.
Inputs and outputs (names, data types, dimensions) come from the model; a
dynamic first dimension becomes Triton's batch dimension (``max_batch_size``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from opbridge.sdk.package import is_base_library

# ONNX tensor element type -> Triton data type.
TRITON_TYPES = {
    1: "TYPE_FP32",
    2: "TYPE_UINT8",
    3: "TYPE_INT8",
    4: "TYPE_UINT16",
    5: "TYPE_INT16",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
    8: "TYPE_STRING",
    9: "TYPE_BOOL",
    10: "TYPE_FP16",
    11: "TYPE_FP64",
    12: "TYPE_UINT32",
    13: "TYPE_UINT64",
    16: "TYPE_BF16",
}


@dataclass
class Tensor:
    name: str
    data_type: str
    dims: list[int]  # -1 for a dynamic dimension; without the batch dimension when batched


def _tensors(values, batched: bool, kind: str) -> list[Tensor]:
    found = []
    for value in values:
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type not in TRITON_TYPES:
            raise ValueError(
                f"opbridge package: {kind} {value.name!r} has ONNX element type "
                f"{tensor_type.elem_type}, which Triton has no data type for"
            )
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
        found.append(
            Tensor(value.name, TRITON_TYPES[tensor_type.elem_type], dims[1:] if batched else dims)
        )
    return found


def _batched(model) -> bool:
    """Whether every input and output has a dynamic first dimension (Triton's
    batch dimension)."""
    values = list(_graph_inputs(model)) + list(model.graph.output)

    def dynamic_first(value) -> bool:
        dims = value.type.tensor_type.shape.dim
        return bool(dims) and not dims[0].HasField("dim_value")

    return bool(values) and all(dynamic_first(v) for v in values)


def _graph_inputs(model):
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _block(kind: str, tensors: list[Tensor]) -> list[str]:
    lines = [f"{kind} ["]
    for i, t in enumerate(tensors):
        dims = ", ".join(str(d) for d in t.dims) if t.dims else ""
        lines += [
            "  {",
            f'    name: "{t.name}"',
            f"    data_type: {t.data_type}",
            f"    dims: [ {dims} ]" if dims else "    dims: [ ]",
            "  }" + ("," if i < len(tensors) - 1 else ""),
        ]
    lines.append("]")
    return lines


def config_pbtxt(
    model,
    name: str,
    libraries: list[str],
    *,
    max_batch_size: int = 8,
    threads: int | None = None,
    instances: int = 1,
) -> str:
    """The ``config.pbtxt`` text for ``model`` (a ``ModelProto``)."""
    batched = _batched(model) and max_batch_size > 0
    inputs = _tensors(_graph_inputs(model), batched, "input")
    outputs = _tensors(model.graph.output, batched, "output")
    lines = [
        f'name: "{name}"',
        'backend: "onnxruntime"',
        f"max_batch_size: {max_batch_size if batched else 0}",
        'default_model_filename: "model.onnx"',
        *_block("input", inputs),
        *_block("output", outputs),
        "instance_group [",
        "  {",
        f"    count: {instances}",
        "    kind: KIND_CPU",
        "  }",
        "]",
    ]
    for library in libraries:
        lines += ["model_operations {", f'  op_library_filename: "{library}"', "}"]
    if threads is not None:
        for key, value in (("intra_op_thread_count", threads), ("inter_op_thread_count", 1)):
            lines += [
                "parameters {",
                f'  key: "{key}"',
                f'  value: {{ string_value: "{value}" }}',
                "}",
            ]
    return "\n".join(lines) + "\n"


def _ldd(path: Path) -> dict[str, str | None]:
    """``ldd``'s resolution of every shared library ``path`` needs, directly
    or through another (its DT_NEEDED entries and theirs): soname -> the file
    it resolves to here, None when not found. Without ``LD_LIBRARY_PATH``,
    which a server does not share."""
    if shutil.which("ldd") is None:
        raise RuntimeError(
            f"opbridge package: cannot list the shared libraries {path.name} needs: no ldd on PATH"
        )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    result = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(
            f"opbridge package: ldd {path} failed: {(result.stderr or result.stdout).strip()}"
        )
    found: dict[str, str | None] = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if match:
            name, target = match.groups()
            found[name] = None if target == "not found" else target
    return found


def dependencies(library: str | os.PathLike) -> dict[str, Path]:
    """The shared libraries ``library`` needs that are not part of the
    system's base (:data:`opbridge.sdk.package.BASE_LIBRARIES`), by soname, as resolved here;
    a RuntimeError naming one that is not found."""
    library = Path(library)
    needed = {}
    for soname, target in _ldd(library).items():
        if is_base_library(soname):
            continue
        if target is None:
            raise RuntimeError(
                f"opbridge package: {library} needs {soname}, which is not found here "
                "(ldd: not found)"
            )
        needed[soname] = Path(target)
    return needed


def _copy_with_dependencies(source: Path, folder: Path) -> list[str]:
    """Copies an op library and the libraries it needs (:func:`dependencies`)
    into ``folder``; returns the dependencies' sonames. Warns when the copy's
    RUNPATH does not find them there (no ``$ORIGIN``)."""
    shutil.copyfile(source, folder / source.name)
    needed = dependencies(source)
    for soname, path in needed.items():
        shutil.copyfile(path, folder / soname)
    here = folder.resolve()
    elsewhere = [
        f"{soname} => {target}"
        for soname, target in _ldd(folder / source.name).items()
        if soname in needed and (target is None or Path(target).resolve().parent != here)
    ]
    if elsewhere:
        warnings.warn(
            f"opbridge package: {source.name} does not find the libraries copied beside it "
            f"({', '.join(elsewhere)}): its RUNPATH lacks $ORIGIN (a build-tree library?); "
            "package the installed one, whose RUNPATH is $ORIGIN",
            stacklevel=3,
        )
    return sorted(needed)


def triton_repository(
    model_path: str | os.PathLike,
    repository: str | os.PathLike,
    *,
    name: str | None = None,
    max_batch_size: int = 8,
    threads: int | None = None,
    instances: int = 1,
    mount: str | None = None,
) -> Path:
    """Writes the model repository; returns the model's folder.

    ``mount`` is where ``repository`` will be seen by the server (e.g.
    ``/models`` in a container): the library paths in ``config.pbtxt`` are
    written under it; by default they are the absolute paths written here.
    """
    import onnx

    from opbridge.runtimes.model import libraries_for
    from opbridge.runtimes.onnxruntime import get_library_path

    model_path = Path(model_path)
    proto = onnx.load(model_path)
    name = name or model_path.stem
    folder = Path(repository) / name
    version = folder / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_path, version / "model.onnx")
    used = {node.domain for node in proto.graph.node}
    paths = []
    for library in libraries_for(proto):
        if library.onnx_domain not in used:
            continue
        source = Path(get_library_path(library))
        _copy_with_dependencies(source, version)
        base = Path(mount) / name / "1" if mount else version.resolve()
        paths.append(str(base / source.name))
    text = config_pbtxt(
        proto,
        name,
        paths,
        max_batch_size=max_batch_size,
        threads=threads,
        instances=instances,
    )
    (folder / "config.pbtxt").write_text(text)
    return folder
