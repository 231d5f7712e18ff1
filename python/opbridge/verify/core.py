"""The verification itself: the model exported (or loaded), checked, and
run in PyTorch and ONNX Runtime for every case at every level, with the
run's state in one object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opbridge.onnx import METADATA_ROUTE_KEY, ROUTES
from opbridge.onnx import export as export_onnx
from opbridge.ort import InferenceSession, load_model
from opbridge.verify.comparison import Tolerance, compare
from opbridge.verify.layers import LayerCheck, Recorder, record
from opbridge.verify.report import FAIL, PASS, Cell, VerificationReport, one_line
from opbridge.verify.structure import graph_inputs, io_info, structure_checks
from opbridge.verify.sweeps import (
    BASE_LEVEL,
    Case,
    build_cases,
    leaves,
    resolve_levels,
    to_numpy,
)

SessionFactory = Callable[[bytes, str], Any]


def default_session_factory(model: bytes, level: str):
    """An ONNX Runtime session (opbridge library registered) at ``level``."""
    return InferenceSession(model, optimization_level=level)


def verify(
    model: torch.nn.Module,
    args: Any,
    *,
    route: str | None = None,
    onnx_model: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    opset: int | None = None,
    dynamo: bool = True,
    dynamic_shapes: Any = None,
    dynamic_batch: bool = True,
    batch_sizes: Sequence[int] | None = None,
    draws: int = 3,
    inputs: Any = None,
    levels: Sequence[str] | None = None,
    layers: bool = True,
    session_factory: SessionFactory | None = None,
    seed: int = 0,
) -> VerificationReport:
    """Verifies that ``model`` computes the same numbers in PyTorch and ONNX Runtime.

    ``args`` are the example inputs (a tuple, or one tensor). Without
    ``onnx_model`` the model is exported by ``route`` (required: one of
    ``opbridge.onnx.ROUTES``) with a dynamic batch dimension
    (``dynamic_batch=False`` or ``dynamic_shapes`` to choose otherwise).
    ``onnx_model`` (a path, bytes or ``ModelProto``) is verified as given,
    by the route its ``opbridge.route`` metadata names; ``route`` is then
    needed only for a model without that metadata, and one that disagrees
    with it is an error. The route decides which structure rules apply.

    Sweeps: every ONNX Runtime optimization level (``levels``, default all
    the runtime has), ``batch_sizes`` (default 1, the export batch and a
    large one; only for a dynamic batch dimension), and ``draws`` input sets
    at the export batch: the example first, then random ones drawn like it,
    or instead the caller's ``inputs`` (see :func:`load_inputs`).

    ``rtol`` and ``atol`` apply to every tensor compared when given; by
    default they follow the PyTorch tensor's dtype: 1e-7 for float64
    (``DEFAULT_TOLERANCE_FLOAT64``), 1e-5 for the others.

    ``session_factory(model_bytes, level)`` makes the ONNX Runtime sessions
    (default :func:`default_session_factory`). ``layers=False`` skips the
    layer-by-layer comparison.
    """
    if route is not None and route not in ROUTES:
        raise ValueError(f"opbridge.verify: route must be one of {ROUTES}, got {route!r}")
    tolerance = Tolerance(rtol, atol)
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple):
        raise TypeError(
            f"opbridge.verify: args must be a tuple of example inputs, got {type(args).__name__}"
        )
    # BASE_LEVEL is the reference for the others; main_level is reported as the final outputs.
    levels, main_level = resolve_levels(levels)

    if onnx_model is not None:
        proto, source = _load_model(onnx_model)
        route = _model_route(proto, route)
    elif route is None:
        raise TypeError(
            f"opbridge.verify: route is required to export the model: pass route= one of "
            f"{ROUTES} (or onnx_model= to verify a model as given)"
        )
    else:
        proto, source = _export(model, args, route, opset, dynamo, dynamic_shapes, dynamic_batch)

    with torch.no_grad():
        example_outputs = leaves(model(*args))
    report = VerificationReport(
        passed=False,
        route=route,
        rtol=tolerance.other[0],
        atol=tolerance.other[1],
        model_source=source,
        rtol_float64=tolerance.float64[0],
        atol_float64=tolerance.float64[1],
        onnx_model=proto,
    )
    report.structure = structure_checks(proto, route, model, leaves(args), example_outputs)
    report.inputs = [io_info(v) for v in graph_inputs(proto)]
    report.outputs_info = [io_info(v) for v in proto.graph.output]
    report.levels = levels
    cases, report.batch_sweep = build_cases(
        args, report.inputs, batch_sizes=batch_sizes, draws=draws, inputs=inputs, seed=seed
    )

    run = _Run(
        model=model,
        report=report,
        cases=cases,
        levels=levels,
        main_level=main_level,
        tolerance=tolerance,
        factory=session_factory or default_session_factory,
    )
    run.open_sessions(proto, args, layers)
    run.run()
    report.passed = not report.failures()
    return report


@dataclass
class _Run:
    """One verification under way: what it runs, the sessions it runs them
    in, and the report it fills."""

    model: torch.nn.Module
    report: VerificationReport
    cases: list[Case]
    levels: list[str]
    main_level: str  # whose results on the example are the report's final outputs
    tolerance: Tolerance
    factory: SessionFactory
    sessions: dict[str, Any] = field(default_factory=dict)  # level -> session
    layers: LayerCheck | None = None

    def open_sessions(self, proto, args: tuple, layers: bool) -> None:
        """Sessions for the model at every level, and the layer-by-layer check
        (module outputs exposed, at BASE_LEVEL) when it applies."""
        model_bytes = proto.SerializeToString()
        for level in self.levels:
            try:
                self.sessions[level] = self.factory(model_bytes, level)
            except Exception as error:
                self.report.errors.append(
                    f"ONNX Runtime could not load the model at {level}: {one_line(error)}"
                )
        if not layers:
            self.report.layer_mapping = "not run (layers=False)"
            return
        self.layers, self.report.layer_mapping = LayerCheck.prepare(
            proto, self.model, args, self.factory
        )

    def run(self) -> None:
        """Every case at every level, and layer by layer where it applies."""
        for case in self.cases:
            if self.layers is None:
                with torch.no_grad():
                    output = self.model(*case.args)
                recorder = None
            else:
                output, recorder = record(self.model, case.args)
            self._run_levels(case, [to_numpy(t) for t in leaves(output)])
            if recorder is not None:
                self._compare_layers(BASE_LEVEL, case, recorder)

        # Where a level changes the results, compare layer by layer at that level
        # too (exposing module outputs may keep some fusions from happening).
        if self.layers is not None and self.layers.results:
            for level in self.report.fusion_problems:
                try:
                    self.layers.sessions[level] = self.factory(self.layers.model_bytes, level)
                except Exception as error:
                    self.report.errors.append(
                        f"layer by layer at {level}: ONNX Runtime could not load the model: "
                        f"{one_line(error)}"
                    )
                    continue
                for case in self.cases:
                    _, recorder = record(self.model, case.args)
                    self._compare_layers(level, case, recorder)

        if self.layers is not None:
            self.report.layers = list(self.layers.results.values())
            self.report.first_divergence = self.layers.first_divergence

    def _run_levels(self, case: Case, expected: list[np.ndarray]) -> None:
        """Runs ``case`` at every level; compares with PyTorch and with BASE_LEVEL."""
        report, tolerance = self.report, self.tolerance
        base_outputs = None
        for level in self.levels:
            if level not in self.sessions:
                continue
            cell = Cell(case.label, case.batch, level, PASS, 0.0, 0.0)
            report.cells.append(cell)
            try:
                got = list(_run_session(self.sessions[level], case).values())
            except Exception as error:
                cell.status, cell.error = FAIL, one_line(error)
                cell.max_abs_err = cell.max_rel_err = float("inf")
                continue
            names = [o.name for o in self.sessions[level].get_outputs()]
            comparisons = [
                compare(name, g, e, *tolerance.of(e))
                for name, g, e in zip(names, got, expected, strict=False)
            ]
            if len(got) != len(expected):
                cell.error = f"{len(got)} outputs in ONNX Runtime, {len(expected)} in PyTorch"
            cell.status = PASS if all(c.passed for c in comparisons) and not cell.error else FAIL
            cell.max_abs_err = max((c.max_abs_err for c in comparisons), default=0.0)
            cell.max_rel_err = max((c.max_rel_err for c in comparisons), default=0.0)
            if case.label == "example" and level == self.main_level:
                report.outputs = comparisons
            if level == BASE_LEVEL:
                base_outputs = got
            elif base_outputs is not None and len(base_outputs) == len(got):
                against_base = [
                    compare(n, g, b, *tolerance.of(b))
                    for n, g, b in zip(names, got, base_outputs, strict=True)
                ]
                cell.max_abs_diff_vs_base = max((c.max_abs_err for c in against_base), default=0.0)
                # Nothing compared (NaN everywhere at both levels) is the final
                # outputs' failure, not a difference between levels.
                differs = [c for c in against_base if not c.passed and c.compared != 0]
                if differs and level not in report.fusion_problems:
                    report.fusion_problems.append(level)

    def _compare_layers(self, level: str, case: Case, recorder: Recorder) -> None:
        try:
            values = _run_session(self.layers.sessions[level], case)
        except Exception as error:
            self.report.errors.append(
                f"layer by layer, {case.label} at {level}: ONNX Runtime failed: {one_line(error)}"
            )
            return
        self.layers.compare(values, recorder, self.tolerance, case.label, level)


def _run_session(session, case: Case) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    tensors = leaves(case.args)
    if len(names) != len(tensors):
        raise ValueError(f"the session has {len(names)} inputs, the case {len(tensors)} tensors")
    feed = {name: to_numpy(t) for name, t in zip(names, tensors, strict=True)}
    output_names = [o.name for o in session.get_outputs()]
    return dict(zip(output_names, session.run(None, feed), strict=True))


def _export(model, args, route, opset, dynamo, dynamic_shapes, dynamic_batch) -> tuple[Any, str]:
    """The model exported by ``route``, with a dynamic batch dimension when
    asked and possible, and the report's line saying how it was exported."""
    options = dict(route=route, opset=opset, dynamo=dynamo)
    if dynamo:
        options["verbose"] = False
    first = leaves(args)
    note = ""
    if dynamic_shapes is None and dynamic_batch and first and first[0].dim() > 0:
        try:
            proto = export_onnx(model, args, dynamic_batch=True, **options)
            return proto, f"exported by route {route!r} with a dynamic batch dimension"
        except Exception as error:
            note = f"; a dynamic batch dimension did not export ({one_line(error)[:200]})"
    proto = export_onnx(model, args, dynamic_shapes=dynamic_shapes, **options)
    return proto, f"exported by route {route!r}{note}"


def _load_model(onnx_model: Any):
    import onnx

    if isinstance(onnx_model, onnx.ModelProto):
        return onnx_model, "given ModelProto"
    if isinstance(onnx_model, bytes):
        return load_model(onnx_model), "given bytes"
    path = Path(onnx_model)
    if not path.is_file():
        raise FileNotFoundError(f"opbridge.verify: ONNX model {path} does not exist")
    proto = load_model(path)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        onnx.load_external_data_for_model(proto, str(path.parent))
    return proto, str(path)


def _model_route(proto, route: str | None) -> str:
    """The route a given model was exported by: its ``opbridge.route``
    metadata, which ``route`` (when given) must match; ``route`` for a model
    without that metadata, where it is then required."""
    metadata = {p.key: p.value for p in proto.metadata_props}
    recorded = metadata.get(METADATA_ROUTE_KEY)
    if recorded is None:
        if route is None:
            raise ValueError(
                f"opbridge.verify: the ONNX model has no {METADATA_ROUTE_KEY} metadata (it was "
                f"not exported by opbridge.onnx.export); pass route= one of {ROUTES} to say "
                "which route's rules it follows"
            )
        return route
    if route is not None and route != recorded:
        raise ValueError(
            f"opbridge.verify: route={route!r} was given, but the ONNX model's "
            f"{METADATA_ROUTE_KEY} metadata says it was exported by route {recorded!r}; pass "
            f"route={recorded!r} or leave route out"
        )
    return recorded
