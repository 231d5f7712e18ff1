"""How a model is exported, as one object: :class:`ExportOptions`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DEFAULT_OPSET = 18


@dataclass(frozen=True)
class ExportOptions:
    """The settings of one export (each default is here, and only here).

    - ``opset``: the ai.onnx opset the model imports (torch's name for it,
      ``opset_version``, is accepted by :func:`opbridge.export.export` too).
    - ``dynamo``: the dynamo exporter (default) or the legacy TorchScript one.
    - ``dynamic_batch``: dimension 0 of the inputs that share the first
      input's batch becomes one dynamic ``batch`` dimension.
    - ``dynamic_shapes``: torch.export's ``dynamic_shapes`` (not with
      ``dynamic_batch``).
    - ``requires_library``: with ``route="auto"``, False leaves out the routes
      whose models need an operator library.
    - ``simplify``: simplify the exported model with
      :func:`opbridge.export.simplify.simplify` (library nodes kept as
      exported; the model as exported, and a warning, when it cannot be).
    - ``avoid``: ONNX operators the export must not emit where an op's form
      has another way (``"RotaryEmbedding"`` for ai.onnx,
      ``"com.microsoft::RotaryEmbedding"``): those the runtime the model is
      for computes wrong (:attr:`opbridge.runtimes.Runtime.wrong_forms`).
    """

    opset: int = DEFAULT_OPSET
    dynamo: bool = True
    dynamic_batch: bool = False
    dynamic_shapes: Any = None
    requires_library: bool = True
    simplify: bool = False
    avoid: frozenset[str] = frozenset()

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def merged(self, keywords: dict, where: str) -> ExportOptions:
        """These options with the keywords of ``keywords`` that name a field
        (taken out of it) set; ``opset_version`` is ``opset``."""
        if "opset_version" in keywords:
            opset_version = keywords.pop("opset_version")
            if "opset" in keywords and keywords["opset"] not in (None, opset_version):
                raise TypeError(
                    f"{where}: got opset={keywords['opset']} and opset_version={opset_version}; "
                    "pass one (opset_version is torch's name for opset)"
                )
            keywords["opset"] = opset_version
        given = {name: keywords.pop(name) for name in self.fields() if name in keywords}
        given = {name: value for name, value in given.items() if value is not None}
        return dataclasses.replace(self, **given)
