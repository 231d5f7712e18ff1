"""A griffe extension for the Python API reference (mkdocs.yml, mkdocstrings'
``extensions``): the docstrings name other objects with Sphinx roles
(``:func:`opbridge.runtimes.onnxruntime.get_library_path```, ``:class:`Output```); Markdown has no
roles, so each becomes inline code (`` `opbridge.runtimes.onnxruntime.get_library_path` ``)."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const):`~?([^`]+)`")


def _plain(obj) -> None:
    docstring = obj.docstring
    if docstring is not None and ":" in docstring.value:
        docstring.value = ROLE.sub(r"`\1`", docstring.value)


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        _plain(obj)

    def on_object(self, *, obj, **kwargs) -> None:
        _plain(obj)

    def on_package(self, *, pkg, **kwargs) -> None:
        _plain(pkg)
