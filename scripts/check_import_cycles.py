"""Fails when modules of python/opbridge import each other in a circle.

import-linter's contracts (pyproject.toml) keep the layers in order and
sibling packages acyclic; this also catches a circle through a package's
``__init__`` (a package importing its child that imports the package back),
which those contracts do not look at. Every import counts, function-level
ones included; imports under ``TYPE_CHECKING`` do not run and do not count.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

PACKAGE = "opbridge"


def import_graph(source: Path) -> dict[str, set[str]]:
    """Module -> the modules it imports, read from the package under ``source``."""
    sys.path.insert(0, str(source))
    # No cache: a cached graph is keyed by file times, which copies keep.
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def main(argv: list[str]) -> int:
    # The folder holding the package: python/ of this checkout unless given.
    source = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "python"
    edges = import_graph(source)
    found = cycles(edges)
    for component in found:
        members = set(component)
        ties = [f"{a} -> {b}" for a in component for b in sorted(edges[a] & members)]
        print(f"import cycle among {len(component)} modules:", file=sys.stderr)
        for tie in ties:
            print(f"  {tie}", file=sys.stderr)
    if found:
        return 1
    print(f"no import cycles among {len(edges)} modules of {PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
