"""The error every export refusal raises (re-exported as
:class:`opbridge.export.ExportError`), in a module of its own so that the
export's parts below the package can raise it."""

from __future__ import annotations


class ExportError(ValueError):
    """An export opbridge refuses, with the reason (an opset that cannot be
    reached, an op and dtype with no exact form on the chosen route)."""
