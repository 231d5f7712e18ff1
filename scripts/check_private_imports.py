"""Fails when a module of python/opbridge uses another part's private name.

Run by ``./dev lint``. A ``_``-prefixed name (``__dunder__`` names aside) is
private to the part of the package that defines it: a subpackage
(``opbridge.export``, ``opbridge.ops``, ...) with every module under it, or
a module directly in ``opbridge/`` (``opbridge._library``,
``opbridge.autoroute``, ...) on its own. Any module may import a private
module (``opbridge._dtypes``, ``opbridge.ops._card``) and use its public
names, except a module built from C++ (``opbridge._C``), which is the loading
part's own; what it may not do is import another part's private
name (``from opbridge.runtimes.onnxruntime import _path_of`` in
``opbridge.deploy``), nor reach one through a module it imported
(``onnxruntime._path_of``). A name another part needs is made public, or the
code that uses it moves to the part that defines it.

It reads the sources and imports nothing of the package; each use found is
printed as ``file:line``.

    .venv/bin/python scripts/check_private_imports.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "opbridge"

# Modules of the package built from C++ (no Python source to find), each
# private to the part that loads it: the others reach what it offers through
# that part's public names (opbridge._library.simd_target, Library.module).
EXTENSIONS = {"opbridge._C": "opbridge._library"}


def modules(source: Path) -> dict[str, Path]:
    """Every module of the package under ``source``: dotted name -> file."""
    found = {}
    for path in sorted((source / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def part(module: str, packages: set[str]) -> str:
    """The part of the package ``module`` belongs to: its subpackage of
    ``opbridge``, or the module itself when it sits directly in ``opbridge/``."""
    top = ".".join(module.split(".")[:2])
    return top if top in packages else module


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class Uses(ast.NodeVisitor):
    """The private names of the package one module uses: (line, module, name)."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.bound: dict[str, str] = {}  # a local name -> the package's module it holds
        self.found: list[tuple[int, str, str]] = []
        self.extensions: list[tuple[int, str]] = []  # (line, extension module) imported

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.package.split(".")
        base = base[: len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] != PACKAGE:
                continue
            if alias.name in EXTENSIONS:
                self.extensions.append((node.lineno, alias.name))
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:
                self.bound[PACKAGE] = PACKAGE

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = self._absolute(node)
        if source.split(".")[0] != PACKAGE:
            return
        for alias in node.names:
            target = f"{source}.{alias.name}"
            if target in EXTENSIONS or source in EXTENSIONS:
                self.extensions.append((node.lineno, target if target in EXTENSIONS else source))
            if target in self.known:
                self.bound[alias.asname or alias.name] = target
            elif private(alias.name):
                self.found.append((node.lineno, source, alias.name))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in self.bound:
            module = self.bound[value.id]
            for attr in reversed(chain):
                if f"{module}.{attr}" in EXTENSIONS:
                    self.extensions.append((node.lineno, f"{module}.{attr}"))
                if f"{module}.{attr}" not in self.known:
                    if private(attr):
                        self.found.append((node.lineno, module, attr))
                    break
                module = f"{module}.{attr}"
            return
        self.generic_visit(node)


def offenses(source: Path) -> list[str]:
    """``file:line: module imports name from module`` for each use of another
    part's private name."""
    found = modules(source)
    known = set(found) | set(EXTENSIONS)
    packages = {m for m, path in found.items() if path.name == "__init__.py"}
    lines = []
    for module, path in sorted(found.items()):
        uses = Uses(module, path.name == "__init__.py", known)
        uses.visit(ast.parse(path.read_text(), str(path)))
        for line, extension in uses.extensions:
            if module != EXTENSIONS[extension]:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                lines.append(f"{where}:{line}: {module} imports {extension}")
        for line, owner, name in sorted(set(uses.found)):
            if part(owner, packages) != part(module, packages):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                lines.append(f"{where}:{line}: {module} uses {owner}.{name}")
    return lines


def main(argv: list[str]) -> int:
    # The folder holding the package: python/ of this checkout unless given.
    source = Path(argv[0]) if argv else ROOT / "python"
    lines = offenses(source)
    for line in lines:
        print(line)
    if lines:
        print(
            f"{len(lines)} use(s) of another part's private name: make the name "
            "public, or move the code to the part that defines it",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
