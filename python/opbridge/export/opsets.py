"""The opsets export accepts per exporter, and the checks of the opset a
model asked for against the one it got."""

from __future__ import annotations

import logging

from opbridge.export.errors import ExportError

# The dynamo exporter builds every graph at this opset and converts it to the
# requested one after: with onnxscript's version converter from 18 to
# DYNAMO_CONVERTER_MAX_OPSET, with onnx's converter outside that range.
# Both keep a node that is already in the requested opset's form (e.g.
# RMSNormalization, or ReduceMean with an axes attribute below 18), but
# onnx's converter rewrites an upward conversion from the build opset and
# has no adapter for an op newer than it.
DYNAMO_BUILD_OPSET = 18


DYNAMO_CONVERTER_MAX_OPSET = 25


# The opsets export accepts, per exporter (both ends included):
# - dynamo: onnx's converter cannot take an opset-18 graph below 15 (it has no
#   adapter for Add 14 -> 13 or Pow 15 -> 14);
# - legacy: the standard forms need opset 13 (Unsqueeze takes its axes as an
#   input), and the TorchScript exporter stops at 20;
# - both: ONNX Runtime 1.30 loads models up to opset 26.
OPSET_RANGES = {"dynamo": (15, 26), "legacy": (13, 20)}


def check_opset(opset: int, dynamo: bool = True) -> int:
    """``opset`` when ``opbridge.export.export`` accepts it for that exporter,
    else a ValueError that names the accepted range."""
    exporter = "dynamo" if dynamo else "legacy"
    low, high = OPSET_RANGES[exporter]
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise ValueError(f"opbridge.export: opset must be an int, got {opset!r}")
    if not low <= opset <= high:
        other = OPSET_RANGES["legacy" if dynamo else "dynamo"]
        raise ValueError(
            f"opbridge.export: opset {opset} is not supported with the {exporter} exporter "
            f"(dynamo={dynamo}); it exports opsets {low} to {high} (with dynamo={not dynamo}: "
            f"{other[0]} to {other[1]})"
        )
    return opset


def decomposition_opset(opset: int, dynamo: bool = True) -> int:
    """The opset whose forms a standard-route decomposition uses when the
    export asks for ``opset``: that opset, except with the dynamo exporter
    above DYNAMO_CONVERTER_MAX_OPSET, where onnx's converter takes the graph
    up from DYNAMO_BUILD_OPSET and so needs that opset's forms."""
    if dynamo and opset > DYNAMO_CONVERTER_MAX_OPSET:
        return DYNAMO_BUILD_OPSET
    return opset


def refused_at(error: ValueError, opset: int) -> ExportError:
    """A form's refusal (``error``) as the export's error at ``opset``."""
    return ExportError(f"{error} (export at opset {opset})")


class ConversionLog(logging.Handler):
    """Collects what onnxscript's version converter logs during an export
    (the dynamo exporter reports a failed conversion only there)."""

    LOGGER = "onnxscript.version_converter"

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            cause = str(record.exc_info[1]).strip().splitlines()
            message += f": {cause[-1] if cause else type(record.exc_info[1]).__name__}"
        self.messages.append(message)

    def __enter__(self):
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger(self.LOGGER).removeHandler(self)
        return False


def check_opset_import(proto, opset: int, dynamo: bool, conversion) -> None:
    imported = {imp.domain: imp.version for imp in proto.opset_import}
    got = imported.get("", imported.get("ai.onnx"))
    if got is None or got == opset:
        return
    why = ""
    if conversion is not None and conversion.messages:
        why = "; the converter said: " + " | ".join(conversion.messages[-2:])
    hint = ""
    if dynamo:
        hint = (
            f" The dynamo exporter builds at opset {DYNAMO_BUILD_OPSET} and converts; "
            "export at an opset the model's ops convert to, or with dynamo=False."
        )
    raise ExportError(
        f"opbridge.export.export: asked for opset {opset}, but the exported model imports ai.onnx "
        f"opset {got}: it could not be converted to {opset}{why}.{hint}"
    )
