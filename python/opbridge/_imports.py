"""Waiting for another package's import: the one import hook opbridge has.

:func:`when_imported` calls a function once a module is imported: at once
if it is, else through an import finder that waits for that import, runs
the module's own loader, calls the function and removes itself. opbridge
uses it to register with a package it does not import itself (the DTensor
sharding strategies, transformers' OpenVINO exporter); it renames nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable


class _Loader(importlib.abc.Loader):
    """Runs the module's own loader, then the function waiting for it."""

    def __init__(self, loader, after: Callable[[], None]):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class WaitingFinder(importlib.abc.MetaPathFinder):
    """Waits for the import of the first of ``modules`` to be imported
    (once), then calls ``after`` when that import is done. A user subclasses
    it, so that ``sys.meta_path`` says whose finder it is."""

    def __init__(self, modules: tuple[str, ...], after: Callable[[], None]):
        self.modules = modules
        self.after = after

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.after)
        return spec


def when_imported(
    module: str | tuple[str, ...],
    after: Callable[[], None],
    finder: type[WaitingFinder] = WaitingFinder,
) -> None:
    """Calls ``after`` now if ``module`` is imported, else when it is
    imported, through one ``finder`` (a :class:`WaitingFinder`) at the head
    of ``sys.meta_path`` (none added where one already waits for it).

    ``module`` may be a tuple of modules that import each other: ``after``
    is called when the import of whichever comes first is done, which has
    imported the others whole."""
    modules = (module,) if isinstance(module, str) else module
    if any(name in sys.modules for name in modules):
        after()
    elif not any(isinstance(f, finder) and f.modules == modules for f in sys.meta_path):
        sys.meta_path.insert(0, finder(modules, after))
