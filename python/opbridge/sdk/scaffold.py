"""``opbridge new-op DIR --name NAME``: a complete out-of-tree project for one
operator, built on the installed opbridge SDK.

The operator is ``y = cap * tanh(x / cap)`` (soft capping, with a real
backward), named as the user asks: spec and kernel in C++, a Python card
(call, reference, standard decomposition, samples, benchmark inputs), a
``pyproject.toml`` that builds with ``pip install --no-build-isolation -e
DIR``, tests that run the checks every opbridge operator gets, and an
``example.py`` for ``opbridge verify DIR/example.py:make``.
"""

from __future__ import annotations

import re
from pathlib import Path

# The project's files, with @name@, @camel@, @namespace@, @domain@,
# @domain_repr@, @sdk_version@ and @opbridge_version@ where the new
# operator's values go.
TEMPLATES = Path(__file__).resolve().parent / "templates"
_FIELD = re.compile(r"@(name|camel|namespace|domain|domain_repr|sdk_version|opbridge_version)@")


def render(template: str, fields: dict[str, str]) -> str:
    """The template file ``template`` with the fields filled in."""
    text = (TEMPLATES / template).read_text()
    return _FIELD.sub(lambda match: fields[match.group(1)], text)


_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_DOMAIN = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def files(name: str, namespace: str, domain: str) -> dict[str, str]:
    """The project's files, relative path -> text."""
    from opbridge._library import VERSION

    if not _IDENTIFIER.match(name):
        raise ValueError(f"opbridge new-op: --name must be snake_case (a-z, 0-9, _), got {name!r}")
    if not _IDENTIFIER.match(namespace):
        raise ValueError(
            f"opbridge new-op: --namespace must be snake_case (a-z, 0-9, _), got {namespace!r}"
        )
    if namespace == "opbridge":
        raise ValueError("opbridge new-op: the namespace 'opbridge' belongs to opbridge itself")
    if not _DOMAIN.match(domain) or domain == "opbridge":
        raise ValueError(
            f"opbridge new-op: --domain must be a dotted name other than 'opbridge', got {domain!r}"
        )
    fields = {
        "name": name,
        "camel": camel(name),
        "namespace": namespace,
        "domain": domain,
        "domain_repr": repr(domain),
        "sdk_version": ".".join(VERSION.split(".")[:2]),
        "opbridge_version": VERSION,
    }
    return {
        "pyproject.toml": render("pyproject.toml.in", fields),
        "CMakeLists.txt": render("CMakeLists.txt.in", fields),
        "README.md": render("README.md.in", fields),
        f"csrc/{name}/spec.h": render("spec.h.in", fields),
        f"csrc/{name}/spec.cpp": render("spec.cpp.in", fields),
        f"csrc/{name}/kernel.cpp": render("kernel.cpp.in", fields),
        f"python/{namespace}/__init__.py": render("__init__.py.in", fields),
        f"python/{namespace}/{name}.py": render("card.py.in", fields),
        f"tests/test_{name}.py": render("test_op.py.in", fields),
        "example.py": render("example.py.in", fields),
        ".gitignore": "/build/\n__pycache__/\n*.egg-info/\n",
    }


def write(
    directory: Path, name: str, namespace: str | None = None, domain: str | None = None
) -> list[Path]:
    namespace = namespace or f"{name}_ops"
    domain = domain or f"com.example.{namespace}"
    return write_files(directory, files(name, namespace, domain))


def write_files(directory, project: dict[str, str]) -> list[Path]:
    """Writes a project's files (relative path -> text) into ``directory``
    (new, or empty); the paths written."""
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"opbridge new-op: {directory} exists and is not empty")
    written = []
    for relative, text in project.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
