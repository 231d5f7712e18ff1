"""Fails when a route's name stands in the package's logic outside its route.

Run by ``./dev lint``. Everything about a route lives on its ``Route`` in
``python/opbridge/export/routes/`` or is derived from the registry there
(``opbridge.export.routes``): whether a model needs the library, the default
route, ``route="auto"``'s rank, what bench does with it. Outside that folder
this refuses, in ``python/opbridge/``:

- a comparison of something named ``*route*`` with a route's name, or with
  a tuple, list or set of routes' names (``route == "ort"``,
  ``route.name in ("custom", "standard")``);
- a parameter named ``*route*`` whose default is a route's name
  (``route="custom"``), and a ``.get(..., "custom")`` fallback to one;
- a module-level or class-level constant that is a tuple, list or set of
  routes' names only (``("custom", "ort", "standard")``), or a constant
  named ``*route*`` that is one (``DEFAULT_ROUTE = "custom"``).

A route's name in a message, a docstring, a call's argument or a test is
fine. The routes' names are read from the route modules (each one's
``Route(name=...)``); nothing of the package is imported. Each use found is
printed as ``file:line``.

    .venv/bin/python scripts/check_route_names.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "opbridge"
ROUTES = PACKAGE / "export" / "routes"


def route_names(folder: Path = ROUTES) -> set[str]:
    """The ``name=`` of every ``Route(...)`` the route modules make."""
    names = set()
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called(node) == "Route":
                for keyword in node.keywords:
                    if keyword.arg == "name" and _text(keyword.value) is not None:
                        names.add(keyword.value.value)
    return names


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _is_names(node: ast.AST, names: set[str]) -> bool:
    """A route's name, or a non-empty tuple, list or set of routes' names."""
    if _text(node) in names:
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
        return all(_text(element) in names for element in node.elts)
    return False


def _is_fallback(node: ast.AST, names: set[str]) -> bool:
    """``something.get(key, <a route's name>)``."""
    return (
        isinstance(node, ast.Call)
        and _called(node) == "get"
        and len(node.args) == 2
        and _is_names(node.args[1], names)
    )


def _about_routes(node: ast.AST) -> bool:
    return "route" in ast.unparse(node).lower()


def uses(source: str, filename: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` for each use of a route's name in ``source``."""
    tree = ast.parse(source, filename)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for index, operand in enumerate(operands):
                others = operands[:index] + operands[index + 1 :]
                if _is_names(operand, names) and any(_about_routes(o) for o in others):
                    found.append((node.lineno, f"compares a route with {ast.unparse(operand)}"))
                    break
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            with_default = positional[len(positional) - len(args.defaults) :]
            pairs = list(zip(with_default, args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
            for arg, default in pairs:
                if "route" in arg.arg.lower() and _is_names(default, names):
                    found.append((default.lineno, f"{arg.arg}={ast.unparse(default)} by default"))
        elif _is_fallback(node, names):
            found.append((node.lineno, f"falls back to {ast.unparse(node.args[1])}"))
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        for statement in scope.body:
            value = getattr(statement, "value", None)
            if not isinstance(statement, ast.Assign | ast.AnnAssign) or value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if isinstance(value, ast.Constant):
                if _is_names(value, names) and any(_about_routes(t) for t in targets):
                    found.append((statement.lineno, f"a route constant {ast.unparse(value)}"))
            elif _is_names(value, names):
                found.append((statement.lineno, f"a table of routes {ast.unparse(value)}"))
    return sorted(found)


def main() -> int:
    names = route_names()
    if not names:
        print(f"check_route_names: no Route(name=...) found in {ROUTES.relative_to(ROOT)}")
        return 1
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ROUTES in path.parents:
            continue
        rel = path.relative_to(ROOT)
        for line, what in uses(path.read_text(), str(rel), names):
            problems.append(f"{rel}:{line}: {what}")
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"check_route_names: {len(problems)} use(s) of a route's name outside "
            f"{ROUTES.relative_to(ROOT)}: put what it means on the Route, or read the "
            "registry (opbridge.export.routes)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
