"""What a verification runs, as objects grouped by concern: how the model is
exported (:class:`opbridge.export.ExportOptions`), what is swept
(:class:`Sweep`), and the tolerance; :class:`VerifyOptions` holds the three."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opbridge.export import ExportOptions


@dataclass(frozen=True)
class Sweep:
    """The runs of a verification.

    - ``levels``: the runtime's optimization levels (default all it has).
    - ``batch_sizes``: for a dynamic batch (default 1, the export batch and
      a large one); ``sequence_lengths``: for a dynamic dimension 1 (default
      the example's length and twice it).
    - ``draws``: input sets at the export batch (the example, then random
      ones like it), or instead the caller's ``inputs``; ``seed`` draws them.
    - ``layers``: compare layer by layer too.
    """

    levels: Sequence[str] | None = None
    batch_sizes: Sequence[int] | None = None
    sequence_lengths: Sequence[int] | None = None
    draws: int = 3
    inputs: Any = None
    seed: int = 0
    layers: bool = True


@dataclass(frozen=True)
class VerifyOptions:
    """Everything :func:`opbridge.verify` takes besides the model, its inputs,
    the route, the reference, a given ONNX model and the runtime.

    ``export`` defaults to a dynamic batch (verify sweeps it);
    ``dynamic_sequence`` also makes dimension 1 dynamic and sweeps it.
    ``rtol``/``atol`` None follow the output's dtype.
    ``session_factory(model_bytes, level)`` makes the sessions instead of
    the runtime.
    """

    export: ExportOptions = field(default_factory=lambda: ExportOptions(dynamic_batch=True))
    dynamic_sequence: bool = False
    sweep: Sweep = field(default_factory=Sweep)
    rtol: float | None = None
    atol: float | None = None
    session_factory: Callable[[bytes, str], Any] | None = None

    def merged(self, keywords: dict) -> VerifyOptions:
        """These options with the keywords named like one of their fields
        (or a field of ``export`` or ``sweep``) set; a TypeError names any
        other keyword."""
        keywords = dict(keywords)
        export = self.export
        if any(name in keywords for name in (*ExportOptions.fields(), "opset_version")):
            export = export.merged(keywords, "opbridge.verify")
        sweep_fields = {f.name for f in dataclasses.fields(Sweep)}
        sweep = dataclasses.replace(
            self.sweep, **{k: keywords.pop(k) for k in list(keywords) if k in sweep_fields}
        )
        own = {f.name for f in dataclasses.fields(self)} - {"export", "sweep"}
        mine = {k: keywords.pop(k) for k in list(keywords) if k in own}
        if keywords:
            raise TypeError(f"opbridge.verify: unexpected keyword argument(s) {sorted(keywords)}")
        return dataclasses.replace(self, export=export, sweep=sweep, **mine)
