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

    - ``levels``: the runtime's optimization levels (default all it has);
      the runtime's base level is the reference for the others.
    - ``batch_sizes``: for a dynamic batch (default 1, the export batch and
      a large one); ``sequence_lengths``: for a dynamic dimension 1 (with
      ``dynamic_sequence`` or when given; default the example's length and
      twice it).
    - ``draws``: input sets at the export batch (the example, then random
      ones drawn like it, integers within the example's range), or instead
      the caller's ``inputs`` (see :func:`opbridge.verify.load_inputs`);
      ``seed`` draws them.
    - ``layers``: compare layer by layer too: the modules, and each call of
      a loaded library's operator against its node's value
      (``report.operators``; ``report.first_divergence_op`` names the first
      call that diverges and the module that made it).
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

    - ``export``: how the model is exported; defaults to a dynamic batch
      (verify sweeps it; ``dynamic_batch=False`` or ``dynamic_shapes`` to
      choose otherwise). Example inputs with a batch of 1 bring a warning:
      an export at batch 1 may fix the batch.
    - ``dynamic_sequence``: also makes dimension 1 of every input of two or
      more dimensions dynamic (a sequence dimension; inputs of the same
      length share it), and sweeps it.
    - ``sweep``: what runs (:class:`Sweep`).
    - ``rtol``/``atol``: apply to every tensor compared when given; by
      default they follow the PyTorch tensor's dtype: 1e-7 for float64
      (``DEFAULT_TOLERANCE_FLOAT64``), 1e-5 for the others.
    - ``session_factory(model_bytes, level)``: makes the sessions instead of
      the runtime (the runtime's own sessions by default).
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
