"""The verification itself: the model exported (or loaded), checked, and
run in PyTorch and in the runtime (:mod:`opbridge.runtimes`) for every case
at every level, with the run's state in one object."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opbridge import runtimes
from opbridge.export import dynamic_spec, routes
from opbridge.export import export as export_onnx
from opbridge.export.functions import library_functions
from opbridge.export.metadata import METADATA_ROUTE_KEY
from opbridge.runtimes.base import load_model
from opbridge.verify import reference as against_reference
from opbridge.verify.comparison import Tolerance, compare
from opbridge.verify.layers import LayerCheck, Recorder, record
from opbridge.verify.operators import OperatorCheck
from opbridge.verify.options import VerifyOptions
from opbridge.verify.report import (
    BODY,
    FAIL,
    KERNEL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    WARN,
    Cell,
    Check,
    KernelRun,
    ReferenceRun,
    VerificationReport,
    counted,
    one_line,
)
from opbridge.verify.structure import (
    dynamic_axes,
    graph_inputs,
    io_info,
    shapes_line,
    structure_checks,
)
from opbridge.verify.sweeps import (
    Case,
    build_cases,
    leaves,
    resolve_levels,
    to_numpy,
)

SessionFactory = Callable[[bytes, str], Any]


def default_session_factory(model: bytes, level: str):
    """A session of the default runtime (:data:`opbridge.runtimes.DEFAULT`)
    at ``level``, with every loaded library registered."""
    return runtimes.get().session(model, level=level)


def session_factory_of(runtime: runtimes.Runtime) -> SessionFactory:
    """Sessions of ``runtime`` at a level, with every library registered
    (for the default runtime what :func:`default_session_factory` makes)."""
    return lambda model, level: runtime.session(model, level=level)


def verify(
    model: torch.nn.Module,
    args: Any,
    *,
    route: str | None = None,
    reference: torch.nn.Module | None = None,
    onnx_model: Any = None,
    runtime: str | runtimes.Runtime | None = None,
    options: VerifyOptions | None = None,
    **keywords: Any,
) -> VerificationReport:
    """Verifies that ``model`` computes the same numbers in PyTorch and a runtime.

    ``args`` are the example inputs (a tuple, or one tensor). Without
    ``onnx_model`` the model is exported by ``route`` (one of
    ``opbridge.export.routes.choices()``) with a dynamic batch dimension.
    ``onnx_model`` (a path, bytes or ``ModelProto``) is verified as given,
    by the route its ``opbridge.route`` metadata names (``route`` is needed
    only without it, and must agree with it); the route decides which
    structure rules apply. What the report calls dynamic is read from the
    exported graph's inputs, never from what was asked.

    ``options`` (:class:`VerifyOptions`: the export, the sweep, the
    tolerance, the sessions) holds every other setting; each may also be
    given as a keyword (``rtol=``, ``opset=``, ``batch_sizes=``,
    ``levels=``, ``layers=``, ...), which wins over ``options``.

    ``reference`` is the model to agree with, typically a
    ``copy.deepcopy(model)`` kept from before ``opbridge.patch``: the
    patched model's outputs and the runtime's are then also compared with
    its outputs (``report.agreement``; ``report.diverges_in`` names the side
    that diverges), and so are the submodules of the same name
    (``report.reference_layers``, ``report.reference_first_divergence``).

    ``runtime`` is the runtime to verify in (a name of
    :func:`opbridge.runtimes.names`, default the registry's default): its
    levels, its sessions.
    """
    runtime = runtimes.get(runtime)
    settings = (options or VerifyOptions()).merged(keywords)
    sequence_lengths = _check_arguments(route, model, reference, settings)
    args = _example_args(args)
    # The base level is the reference for the others; main_level is reported as the final outputs.
    levels, main_level = resolve_levels(settings.sweep.levels, runtime)
    proto, source, route, asked = _model_to_verify(
        model, args, route, onnx_model, settings, runtime
    )
    tolerance = Tolerance(settings.rtol, settings.atol)
    report = _describe(model, args, proto, source, route, reference, runtime, tolerance)
    _record_setup(report, args, asked, settings, onnx_model is None, runtime, levels, main_level)
    cases = _sweep_cases(args, report, settings, sequence_lengths)
    run = _Run(
        model=model,
        report=report,
        cases=cases,
        levels=levels,
        main_level=main_level,
        base_level=runtime.base_level,
        tolerance=tolerance,
        factory=settings.session_factory or session_factory_of(runtime),
        reference=reference,
        runtime_label=runtime.label,
        runtime=runtime if settings.session_factory is None else None,
        plain_session=runtime.plain_session,
    )
    # The report has the wrong forms' check: its sessions neither warn of them
    # nor refuse them, so that a model that has one is reported on.
    with runtimes.reporting_wrong_forms():
        run.open_sessions(proto, args, settings.sweep.layers)
        run.open_bodies(proto)
        run.run()
        run.check_kernels(proto)
        run.report_bodies()
        if reference is not None:
            run.compare_with_reference(args, settings.sweep.layers)
    report.passed = not report.failures()
    return report


def _record_setup(
    report: VerificationReport,
    args: tuple,
    asked: Any,
    settings: VerifyOptions,
    exported: bool,
    runtime: runtimes.Runtime,
    levels: list[str],
    main_level: str,
) -> None:
    """The report's runtime, levels and warnings about the batch: a given
    model's graph says whether its batch is dynamic; an export, what was
    asked."""
    exporting = settings.export
    if exported:
        batch_dynamic = exporting.dynamic_batch or exporting.dynamic_shapes is not None
    else:
        batch_dynamic = report.dynamic_batch
    report.warnings = _batch_one_warning(args, batch_dynamic) + _asked_but_static(asked, report)
    report.levels = levels
    report.runtime = runtime.name
    report.base_level = runtime.base_level
    report.default_level = main_level


def _sweep_cases(
    args: tuple, report: VerificationReport, settings: VerifyOptions, sequence_lengths: Any
) -> list:
    """The cases the sweep runs; the report records the batch and sequence sweeps."""
    sweep = settings.sweep
    cases, report.batch_sweep, report.sequence_sweep = build_cases(
        args,
        report.inputs,
        batch_sizes=sweep.batch_sizes,
        draws=sweep.draws,
        inputs=sweep.inputs,
        seed=sweep.seed,
        sequence=settings.dynamic_sequence,
        sequence_lengths=sequence_lengths,
    )
    return cases


def _example_args(args: Any) -> tuple:
    """The example inputs as a tuple (one tensor becomes a tuple of one)."""
    if isinstance(args, torch.Tensor):
        return (args,)
    if not isinstance(args, tuple):
        raise TypeError(
            f"opbridge.verify: args must be a tuple of example inputs, got {type(args).__name__}"
        )
    return args


def _check_arguments(route, model, reference, settings: VerifyOptions) -> list[int] | None:
    """Refuses a route, a reference model and settings that cannot go
    together; returns the sequence lengths to sweep (None: the default)."""
    if route is not None and route not in routes.choices():
        raise ValueError(f"opbridge.verify: route must be one of {routes.choices()}, got {route!r}")
    if reference is not None:
        against_reference.check_reference(model, reference)
    if settings.dynamic_sequence and settings.export.dynamic_shapes is not None:
        raise TypeError("opbridge.verify: pass dynamic_shapes or dynamic_sequence=True, not both")
    sequence_lengths = settings.sweep.sequence_lengths
    if sequence_lengths is None:
        return None
    sequence_lengths = list(sequence_lengths)
    if not sequence_lengths or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sequence_lengths
    ):
        raise ValueError(
            f"opbridge.verify: sequence_lengths must be positive integers, got {sequence_lengths!r}"
        )
    return sequence_lengths


def _model_to_verify(model, args: tuple, route, onnx_model, settings: VerifyOptions, runtime):
    """``(proto, source, route, asked)``: the given model with the route its
    metadata names, or the model exported by ``route`` (``asked``: the
    dimensions the export was asked to make dynamic)."""
    asked: set[str] = set()
    if onnx_model is not None:
        proto, source = _load_model(onnx_model)
        return proto, source, _model_route(proto, route), asked
    if route is None:
        raise TypeError(
            f"opbridge.verify: route is required to export the model: pass route= one of "
            f"{routes.choices()} (or onnx_model= to verify a model as given)"
        )
    exporting = settings.export
    proto, source = _export(
        model,
        args,
        route,
        exporting.opset,
        exporting.dynamo,
        exporting.dynamic_shapes,
        exporting.dynamic_batch,
        settings.dynamic_sequence,
        exporting.avoid | runtime.avoid(),
    )
    tensors = leaves(args)
    batch = exporting.dynamic_shapes is None and exporting.dynamic_batch
    if batch and tensors and tensors[0].dim() > 0:
        asked.add("batch")
    if settings.dynamic_sequence and any(t.dim() >= 2 for t in tensors):
        asked.add("sequence")
    return proto, source, route, asked


def _describe(
    model, args, proto, source, route, reference, runtime, tolerance
) -> VerificationReport:
    """A report on ``proto`` before anything runs: its structure checks
    (the route's rules, the runtime's wrong forms and lowered dtypes, a
    reference in training mode), its inputs and outputs."""
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
    if runtime.wrong_forms:
        report.structure.append(_wrong_forms_check(proto, runtime))
    if runtime.lowered_dtypes:
        report.structure.append(_lowered_dtypes_check(proto, runtime))
    if reference is not None:
        report.reference = f"the given {type(reference).__name__}"
        if reference.training:
            report.structure.append(
                Check(
                    "reference model mode",
                    WARN,
                    "the reference model is in training mode (dropout, batch-norm statistics); "
                    "call reference.eval() before verifying",
                )
            )
    report.inputs = [io_info(v) for v in graph_inputs(proto)]
    report.outputs_info = [io_info(v) for v in proto.graph.output]
    report.dynamic_batch, report.dynamic_sequence = dynamic_axes(report.inputs)
    report.shapes = shapes_line(report.inputs)
    return report


def _lowered_dtypes_check(proto, runtime: runtimes.Runtime) -> Check:
    """Whether the model's inputs and outputs have a dtype the runtime
    computes in another (:attr:`opbridge.runtimes.Runtime.lowered_dtypes`;
    its sessions warn of them outside verify): a warning naming them."""
    title = f"no dtype {runtime.label} computes in another"
    uses = runtime.lowered_dtype_uses(runtime.onnx_tensors(proto))
    if not uses:
        return Check(title, PASS, f"no input or output of {sorted(runtime.lowered_dtypes)}")
    return Check(title, WARN, runtime.lowered_dtypes_message(uses))


def _wrong_forms_check(proto, runtime: runtimes.Runtime) -> Check:
    """Whether the model has an ONNX operator the runtime computes wrong in
    some use (:attr:`opbridge.runtimes.Runtime.wrong_forms`; the nodes its
    sessions warn of or refuse, :meth:`Runtime.wrong_form_uses`): a warning
    that says what is wrong and where, since verify's cases may not hit the
    wrong use."""
    found: dict[str, list[str]] = {}
    for use in runtime.wrong_form_uses(proto):
        found.setdefault(use.form, []).append(repr(use.node) if use.node else "(no name)")
    title = f"no operator {runtime.label} computes wrong"
    if not found:
        return Check(title, PASS, f"none of {sorted(runtime.wrong_forms)}")
    parts = []
    for form, nodes in sorted(found.items()):
        wrong = runtime.wrong_forms[form]
        named = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        refused = "; its sessions refuse it outside verify" if wrong.large else ""
        known = f"known max abs error {wrong.max_abs_err:g}; " if wrong.max_abs_err else ""
        parts.append(f"{form}: {wrong.why} ({known}node{'s' * (len(nodes) > 1)} {named}{refused})")
    return Check(title, WARN, f"{'; '.join(parts)} (export for {runtime.name} to avoid them)")


def _batch_one_warning(args: tuple, dynamic: bool) -> list[str]:
    """Warns (and returns the report's line) when the example batch is 1 and
    the batch is meant to be ``dynamic``."""
    tensors = leaves(args)
    if not dynamic or not tensors or tensors[0].dim() == 0 or tensors[0].shape[0] != 1:
        return []
    message = (
        "opbridge.verify: the example inputs have batch 1; an export at batch 1 may specialise "
        "the batch dimension (fix it to 1, or bake 1 into reshapes), and then other batch "
        "sizes fail or go untested: give example inputs with a batch of 2 or more"
    )
    warnings.warn(message, UserWarning, stacklevel=3)
    return [message.removeprefix("opbridge.verify: ")]


def _asked_but_static(asked: set[str], report: VerificationReport) -> list[str]:
    """Lines for the dimensions asked to be dynamic that the exported graph's
    inputs fix (where an export failed with them, the model's line says why)."""
    lines = []
    for kind, dynamic in (("batch", report.dynamic_batch), ("sequence", report.dynamic_sequence)):
        if kind in asked and not dynamic:
            lines.append(
                f"a dynamic {kind} was asked for, but the exported graph's inputs fix it: "
                f"the {kind} is static"
            )
    return lines


@dataclass
class _Run:
    """One verification under way: what it runs, the sessions it runs them
    in, and the report it fills."""

    model: torch.nn.Module
    report: VerificationReport
    cases: list[Case]
    levels: list[str]
    main_level: str  # whose results on the example are the report's final outputs
    base_level: str  # the level that runs the graph as exported; the others are compared with it
    tolerance: Tolerance
    factory: SessionFactory
    reference: torch.nn.Module | None = None
    runtime_label: str = "ONNX Runtime"  # the runtime's name in messages
    sessions: dict[str, Any] = field(default_factory=dict)  # level -> session
    layers: LayerCheck | None = None
    operators: OperatorCheck | None = None  # the calls of library operators
    error_log: list[tuple[str, str]] = field(default_factory=list)  # (where, message)
    failed_cases: set[str] = field(default_factory=set)  # cases PyTorch could not run
    # The library nodes' function bodies (route "function"): a stock ONNX
    # Runtime session, and per case the errors against PyTorch and the kernels.
    bodies: Any = None
    bodies_results: list[tuple[str, bool, float, float]] = field(default_factory=list)
    bodies_error: str | None = None
    # The runtime whose own sessions verify runs (None for a session_factory's):
    # it tells which library nodes ran their kernel (check_kernels).
    runtime: runtimes.Runtime | None = None
    # The runtime's session without any library (Runtime.plain_session), which
    # runs the bodies of model-local functions; None where it has none.
    plain_session: Callable[..., Any] | None = None

    def error(self, where: str, message: str) -> None:
        """Records an error; the report lists each message once, with its count."""
        self.error_log.append((where, message))
        self.report.errors = counted(self.error_log)

    def open_sessions(self, proto, args: tuple, layers: bool) -> None:
        """Sessions for the model at every level, and the layer-by-layer check
        (module outputs exposed, at the base level) when it applies."""
        model_bytes = proto.SerializeToString()
        for level in self.levels:
            try:
                self.sessions[level] = self.factory(model_bytes, level)
            except Exception as error:
                where = f"{self.runtime_label} could not load the model at {level}"
                self.error(where, one_line(error))
        if not layers:
            self.report.layer_mapping = "not run (layers=False)"
            self.report.operator_mapping = "not run (layers=False)"
            return
        self.layers, self.report.layer_mapping, self.report.operator_mapping, self.operators = (
            LayerCheck.prepare(
                proto,
                self.model,
                args,
                self.factory,
                self.base_level,
                self.report.route,
                self.runtime_label,
            )
        )

    def open_bodies(self, proto) -> None:
        """A session without any operator library (the runtime's
        ``plain_session``), when the model's library nodes have model-local
        functions: it runs their bodies, which verify compares with PyTorch
        and with the kernels on every case."""
        if not library_functions(proto):
            return
        if self.plain_session is None:
            self.bodies_error = f"{self.runtime_label} has no session without the library"
            return
        try:
            self.bodies = self.plain_session(proto)
        except Exception as error:
            self.bodies_error = (
                f"{self.runtime_label} without the library could not load it: {one_line(error)}"
            )

    def _run_bodies(self, case: Case, expected: list[np.ndarray], kernels) -> None:
        if self.bodies is None:
            return
        try:
            got = list(_run_session(self.bodies, case).values())
        except Exception as error:
            self.bodies_error = f"{case.label}: {one_line(error)}"
            return
        names = [o.name for o in self.bodies.get_outputs()]
        comparisons = [
            compare(n, g, e, *self.tolerance.of(e))
            for n, g, e in zip(names, got, expected, strict=False)
        ]
        passed = len(got) == len(expected) and all(c.passed for c in comparisons)
        err = max((c.max_abs_err for c in comparisons), default=0.0)
        vs_kernels = max(
            (
                compare(n, g, k, *self.tolerance.of(k)).max_abs_err
                for n, g, k in zip(names, got, kernels or [], strict=False)
            ),
            default=math.nan,
        )
        self.bodies_results.append((case.label, passed, err, vs_kernels))

    def check_kernels(self, proto) -> None:
        """Whether the runtime ran the loaded library's kernel for each library
        node that has a model-local function (a fallback body), by one run of
        the example in a profiled session of the runtime
        (:attr:`opbridge.runtimes.Runtime.library_kernels`); each call of
        the operator check learns what its node ran."""
        report = self.report
        nodes = _nodes_with_bodies(proto)
        if not nodes:
            return
        named, report.kernels = _named(proto, nodes)
        if self.runtime is None:
            report.kernel_check = (
                "not run: the sessions come from session_factory; which library nodes ran "
                "their kernel is known only for the runtime's own sessions"
            )
            for kernel in report.kernels:
                kernel.ran, kernel.status = UNKNOWN, NOT_APPLICABLE
            return
        label, level = self.runtime_label, self.main_level
        case = next((c for c in self.cases if c.label not in self.failed_cases), None)
        ran = None
        if self.runtime.library_kernels is None:
            report.kernel_check = f"unknown: {label} does not tell which kernels ran"
        elif case is None:
            report.kernel_check = "not run: PyTorch ran no case"
        else:
            feeds = {
                value.name: to_numpy(tensor)
                for value, tensor in zip(graph_inputs(named), leaves(case.args), strict=False)
            }
            try:
                ran = self.runtime.library_kernels(named, feeds, level)
            except Exception as error:
                report.kernel_check = f"not run: the profiled run failed: {one_line(error)}"
                self.error(f"kernels, {case.label} at {level}", one_line(error))
        for kernel in report.kernels:
            if ran is None:
                kernel.ran, kernel.status = UNKNOWN, NOT_APPLICABLE
            else:
                kernel.ran = KERNEL if kernel.node in ran else BODY
                kernel.status = PASS if kernel.ran == KERNEL else FAIL
        if ran is not None:
            kernels = sum(k.ran == KERNEL for k in report.kernels)
            report.kernel_check = (
                f"{kernels} of {len(report.kernels)} library nodes with a fallback body ran the "
                f"library's kernel in {label} at {level} ({case.label}, by {label}'s profiling)"
            )
        by_output = {value: k for k in report.kernels for value in k.outputs}
        for result in report.operators:
            found = next((by_output[v] for v in result.onnx_values if v in by_output), None)
            if found is not None:
                result.ran = found.ran

    def report_bodies(self) -> None:
        """The bodies' check in the report's structure checks."""
        if self.bodies is None and self.bodies_error is None:
            return
        title = "function bodies (no library) match PyTorch and the kernels"
        if self.bodies_error is not None:
            self.report.structure.append(Check(title, FAIL, self.bodies_error))
            return
        failed = [label for label, passed, _, _ in self.bodies_results if not passed]
        worst = max((r[2] for r in self.bodies_results), default=0.0)
        vs_kernels = max((r[3] for r in self.bodies_results), default=0.0)
        against = "the kernels"
        if any(k.ran == BODY for k in self.report.kernels):
            against = f"{self.runtime_label} with the library (which ran bodies, not kernels)"
        detail = (
            f"{len(self.bodies_results)} cases in {self.runtime_label} without the library: "
            f"max abs err "
            f"{worst:.3g} vs PyTorch, {vs_kernels:.3g} vs {against}"
        )
        if failed:
            detail += f"; outside the tolerance: {', '.join(failed)}"
        self.report.structure.append(Check(title, FAIL if failed else PASS, detail))

    def run(self) -> None:
        """Every case at every level, and layer by layer where it applies."""
        for case in self.cases:
            try:
                if self.layers is None:
                    with torch.no_grad():
                        output = self.model(*case.args)
                    recorder = None
                else:
                    output, recorder = record(self.model, case.args, self._record_calls)
            except Exception as error:
                self.failed_cases.add(case.label)
                self.error(f"PyTorch, {case.label}", f"the model failed: {one_line(error)}")
                continue
            expected = [to_numpy(t) for t in leaves(output)]
            self._run_levels(case, expected, self._run_reference(case, expected))
            if recorder is not None:
                self._compare_layers(self.base_level, case, recorder)

        # Where a level changes the results, compare layer by layer at that level
        # too (exposing module outputs may keep some fusions from happening).
        if self.layers is not None and (self.layers.results or self._record_calls):
            for level in self.report.fusion_problems:
                try:
                    self.layers.sessions[level] = self.factory(self.layers.model_bytes, level)
                except Exception as error:
                    self.error(
                        f"layer by layer at {level}",
                        f"{self.runtime_label} could not load the model: {one_line(error)}",
                    )
                    continue
                for case in self.cases:
                    if case.label in self.failed_cases:
                        continue
                    _, recorder = record(self.model, case.args, self._record_calls)
                    self._compare_layers(level, case, recorder)

        if self.layers is not None:
            self.report.layers = list(self.layers.results.values())
            self.report.first_divergence = self.layers.first_divergence
        if self.operators is not None:
            self.report.operators = self.operators.results
            first = self.operators.first_divergence
            self.report.first_divergence_op = first.label if first is not None else None

    @property
    def _record_calls(self) -> bool:
        """Whether the layer runs record the calls of library operators too."""
        return self.layers is not None and self.layers.operators is not None

    def _run_reference(self, case: Case, expected: list[np.ndarray]) -> list[np.ndarray] | None:
        """The reference model's outputs on ``case`` (None without a reference,
        or where it failed), compared with the patched model's ``expected``."""
        if self.reference is None:
            return None
        run = ReferenceRun(case.label, case.batch, PASS, 0.0, 0.0)
        self.report.reference_runs.append(run)
        try:
            with torch.no_grad():
                wanted = [to_numpy(t) for t in leaves(self.reference(*case.args))]
        except Exception as error:
            run.status, run.error = FAIL, f"the reference model failed: {one_line(error)}"
            run.max_abs_err = run.max_rel_err = math.inf
            return None
        names = [f"output {i}" for i in range(len(expected))]
        passed, run.max_abs_err, run.max_rel_err, run.error = against_reference.compare_outputs(
            expected, wanted, self.tolerance, names
        )
        run.status = PASS if passed else FAIL
        return wanted

    def compare_with_reference(self, args: tuple, layers: bool) -> None:
        """The three comparisons and the side that diverges; same-named
        modules layer by layer on the example inputs (unless ``layers`` is False)."""
        report = self.report
        against_reference.summarize(report)
        if not layers:
            report.reference_layer_mapping = "not run (layers=False)"
            return
        example = next((r for r in report.reference_runs if r.case == "example"), None)
        outputs_agree = example is not None and example.status == PASS
        try:
            layers_found = against_reference.compare_layers(
                self.model, self.reference, args, self.tolerance, outputs_agree
            )
        except Exception as error:
            report.reference_layer_mapping = f"unavailable: {one_line(error)}"
            return
        (
            report.reference_layers,
            report.reference_first_divergence,
            report.reference_layer_mapping,
        ) = layers_found

    def _run_levels(
        self, case: Case, expected: list[np.ndarray], reference: list[np.ndarray] | None
    ) -> None:
        """Runs ``case`` at every level; compares with PyTorch, with the base level,
        and with the ``reference`` model's outputs when there are some."""
        report, tolerance = self.report, self.tolerance
        base_outputs = main_outputs = None
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
                if reference is not None:
                    cell.reference_status = FAIL
                    cell.reference_max_abs_err = cell.reference_max_rel_err = math.inf
                continue
            names = [o.name for o in self.sessions[level].get_outputs()]
            comparisons = [
                compare(name, g, e, *tolerance.of(e))
                for name, g, e in zip(names, got, expected, strict=False)
            ]
            if len(got) != len(expected):
                cell.error = (
                    f"{len(got)} outputs in {self.runtime_label}, {len(expected)} in PyTorch"
                )
            cell.status = PASS if all(c.passed for c in comparisons) and not cell.error else FAIL
            cell.max_abs_err = max((c.max_abs_err for c in comparisons), default=0.0)
            cell.max_rel_err = max((c.max_rel_err for c in comparisons), default=0.0)
            if reference is not None:
                passed, abs_err, rel_err, _ = against_reference.compare_outputs(
                    got, reference, tolerance, names
                )
                cell.reference_status = PASS if passed else FAIL
                cell.reference_max_abs_err, cell.reference_max_rel_err = abs_err, rel_err
            if case.label == "example" and level == self.main_level:
                report.outputs = comparisons
            if level == self.main_level:
                main_outputs = got
            if level == self.base_level:
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
        self._run_bodies(case, expected, main_outputs)

    def _compare_layers(self, level: str, case: Case, recorder: Recorder) -> None:
        try:
            values = _run_session(self.layers.sessions[level], case)
        except Exception as error:
            self.error(
                f"layer by layer, {case.label} at {level}",
                f"{self.runtime_label} failed: {one_line(error)}",
            )
            return
        self.layers.compare(values, recorder, self.tolerance, case.label, level)


def _nodes_with_bodies(proto) -> list[int]:
    """The positions in the graph of its library nodes that have a
    model-local function of their domain and op type (the ``function``
    route's fallback body)."""
    from opbridge._library import library_for_domain

    functions = {(f.domain, f.name) for f in library_functions(proto).values()}
    # An adopted operator's node has a body and no kernel: nothing to check.
    return [
        i
        for i, node in enumerate(proto.graph.node)
        if library_for_domain(node.domain) is not None and (node.domain, node.op_type) in functions
    ]


def _named(proto, nodes: list[int]) -> tuple[Any, list[KernelRun]]:
    """A copy of ``proto`` in which each node at the positions ``nodes`` has
    a name of its own (``<op type>_<k>`` where it had none), and a KernelRun
    for each, in graph order (what ran still unknown)."""
    from opbridge._library import library_for_domain

    copy = type(proto)()
    copy.CopyFrom(proto)
    taken = {node.name for node in copy.graph.node if node.name}
    calls: dict[str, int] = {}
    kernels = []
    for index in nodes:
        named = copy.graph.node[index]
        if not named.name:
            k = 1
            while f"{named.op_type}_{k}" in taken:
                k += 1
            named.name = f"{named.op_type}_{k}"
            taken.add(named.name)
        library = library_for_domain(named.domain)
        spec = next(
            (s for s in library.specs().values() if s.get("onnx_type") == named.op_type), None
        )
        op = f"{library.torch_namespace}::{spec['name'] if spec else named.op_type}"
        calls[op] = calls.get(op, 0) + 1
        kernels.append(
            KernelRun(
                named.name,
                f"{named.domain}::{named.op_type}",
                op,
                calls[op],
                [value for value in named.output if value],
                UNKNOWN,
                NOT_APPLICABLE,
            )
        )
    return copy, kernels


def _run_session(session, case: Case) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    tensors = leaves(case.args)
    if len(names) != len(tensors):
        raise ValueError(f"the session has {len(names)} inputs, the case {len(tensors)} tensors")
    feed = {name: to_numpy(t) for name, t in zip(names, tensors, strict=True)}
    output_names = [o.name for o in session.get_outputs()]
    return dict(zip(output_names, session.run(None, feed), strict=True))


def _export(
    model,
    args,
    route,
    opset,
    dynamo,
    dynamic_shapes,
    dynamic_batch,
    dynamic_sequence,
    avoid=frozenset(),
) -> tuple[Any, str]:
    """The model exported by ``route``, with the dynamic dimensions asked for
    where possible (else fewer: batch only, then none), and the report's line
    saying how it was exported (what the graph makes dynamic is read from
    the graph, not from here)."""
    options = dict(route=route, opset=opset, dynamo=dynamo, avoid=avoid)
    if dynamo:
        options["verbose"] = False
    tensors = leaves(args)
    has_batch = bool(tensors) and tensors[0].dim() > 0
    attempts = []  # (what, export arguments)
    if dynamic_shapes is None:
        if dynamic_sequence and any(t.dim() >= 2 for t in tensors):
            batch = dynamic_batch and has_batch
            spec = dynamic_spec(args, model if dynamo else None, batch=batch, sequence=True)
            what = "a dynamic batch and sequence" if batch else "a dynamic sequence"
            attempts.append((what, {"dynamic_shapes": spec}))
        if dynamic_batch and has_batch:
            attempts.append(("a dynamic batch dimension", {"dynamic_batch": True}))
    notes = ""
    for what, extra in attempts:
        try:
            proto = export_onnx(model, args, **extra, **options)
            return proto, f"exported by route {route!r}{notes}"
        except Exception as error:
            notes += f"; {what} did not export ({one_line(error)[:200]})"
    proto = export_onnx(model, args, dynamic_shapes=dynamic_shapes, **options)
    return proto, f"exported by route {route!r}{notes}"


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


def _door_route(proto) -> str | None:
    """The route of a model PyTorch's own dynamo exporter made (no model
    metadata of opbridge's): the one route its operators' nodes record in
    their metadata; None where they record none (the TorchScript exporter
    keeps no node metadata) or several."""
    recorded = {
        prop.value
        for node in proto.graph.node
        for prop in node.metadata_props
        if prop.key == METADATA_ROUTE_KEY
    }
    return recorded.pop() if len(recorded) == 1 else None


def _model_route(proto, route: str | None) -> str:
    """The route a given model was exported by: its ``opbridge.route``
    metadata, which ``route`` (when given) must match; ``route`` for a model
    without that metadata, where it is then required."""
    metadata = {p.key: p.value for p in proto.metadata_props}
    recorded = metadata.get(METADATA_ROUTE_KEY) or _door_route(proto)
    if recorded is None:
        if route is None:
            raise ValueError(
                f"opbridge.verify: the ONNX model has no {METADATA_ROUTE_KEY} metadata (it was "
                "not exported by opbridge.export.export, and its nodes do not say which route "
                "PyTorch's exporter took); pass route= one of "
                f"{routes.choices()} to say which route's rules it follows"
            )
        return route
    if route is not None and route != recorded:
        raise ValueError(
            f"opbridge.verify: route={route!r} was given, but the ONNX model's "
            f"{METADATA_ROUTE_KEY} metadata says it was exported by route {recorded!r}; pass "
            f"route={recorded!r} or leave route out"
        )
    return recorded
