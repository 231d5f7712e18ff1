"""``opbridge new-op DIR --name NAME``: a complete out-of-tree project for one
operator, built on the installed opbridge SDK.

The operator is soft capping, with a real backward, named as the user asks:
spec and kernel in C++, a Python card (call, reference, standard
decomposition, samples, benchmark inputs), a ``pyproject.toml`` that builds
with ``pip install --no-build-isolation -e DIR``, tests that run the checks
every opbridge operator gets, an ``example.py`` for ``opbridge verify
DIR/example.py:make``, and a README that describes the operator by its
spec's ``Doc`` (``templates/spec.h.in``), the one place that says what it
computes."""

from __future__ import annotations

import re
from pathlib import Path

# The project's files, with @name@, @camel@, @namespace@, @domain@,
# @domain_repr@, @sdk_version@, @opbridge_version@ and @doc@ (the operator's
# description: its spec's Doc) where the new operator's values go.
TEMPLATES = Path(__file__).resolve().parent / "templates"
_FIELD = re.compile(r"@(name|camel|namespace|domain|domain_repr|sdk_version|opbridge_version|doc)@")
# A spec's description: the string of its builder's .Doc("...").
_SPEC_DOC = re.compile(r'\.Doc\("((?:[^"\\]|\\.)*)"\)')


def render(template: str, fields: dict[str, str]) -> str:
    """The template file ``template`` with the fields filled in."""
    text = (TEMPLATES / template).read_text()
    return _FIELD.sub(lambda match: fields[match.group(1)], text)


def spec_doc(spec_h: str) -> str:
    """The description in a spec header's text (its ``.Doc("...")``)."""
    found = _SPEC_DOC.search(spec_h)
    if found is None:
        raise ValueError('opbridge new-op: the spec has no .Doc("...")')
    return re.sub(r"\\(.)", r"\1", found.group(1))


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
    spec_h = render("spec.h.in", fields)
    # The README describes the operator as its spec does.
    fields["doc"] = spec_doc(spec_h)
    return {
        "pyproject.toml": render("pyproject.toml.in", fields),
        "CMakeLists.txt": render("CMakeLists.txt.in", fields),
        "README.md": render("README.md.in", fields),
        f"csrc/{name}/spec.h": spec_h,
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
