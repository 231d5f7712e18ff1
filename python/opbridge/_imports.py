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
    """Waits for the import of ``module`` (once), then calls ``after``. A
    user subclasses it, so that ``sys.meta_path`` says whose finder it is."""

    def __init__(self, module: str, after: Callable[[], None]):
        self.module = module
        self.after = after

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.after)
        return spec


def when_imported(
    module: str, after: Callable[[], None], finder: type[WaitingFinder] = WaitingFinder
) -> None:
    """Calls ``after`` now if ``module`` is imported, else when it is
    imported, through one ``finder`` (a :class:`WaitingFinder`) at the head
    of ``sys.meta_path`` (none added where one already waits for it)."""
    if module in sys.modules:
        after()
    elif not any(isinstance(f, finder) and f.module == module for f in sys.meta_path):
        sys.meta_path.insert(0, finder(module, after))
