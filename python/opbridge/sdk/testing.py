"""The checks every operator gets, for any operator with a card: opbridge's
own and a user's (``opbridge new-op`` generates a test file that calls them).

Each ``check_*`` function raises ``AssertionError`` (or the error it met)
when the operator fails it:

- :func:`check_reference`: the op equals its card's pure PyTorch reference
  on every sample (float32 and float64 by default; any of
  :func:`supported_dtypes`, within the dtype's :data:`TOLERANCES`);
- :func:`check_opcheck`: ``torch.library.opcheck`` (schema, fake tensors,
  autograd registration, AOT dispatch) on every sample;
- :func:`check_gradcheck`: float64 ``gradcheck`` of every differentiable input;
- :func:`check_compile`: ``torch.compile(fullgraph=True)`` forward and backward;
- :func:`check_export`: export by a route with either exporter at an opset,
  then ONNX Runtime equal to PyTorch at ``ORT_DISABLE_ALL`` and
  ``ORT_ENABLE_ALL``, with the node types the route promises
  (:func:`export_cases`: every route, exporter and opset to run it at);
- :func:`check_value_domains`: the op computes its reference's results for
  every non-finite value its spec declares an input takes (``.Values``);
  :func:`check_value_domains_under_check` the same in a process under
  ``OPBRIDGE_CHECK=1``, whose scan of inputs and outputs must let them through;
- :func:`check_bad_input`: every :func:`bad_inputs` case (an integer first
  input, a second tensor input of another floating dtype, a first input of a
  floating dtype the op does not take, an attribute value the caller names
  as invalid) is refused in PyTorch and in ONNX Runtime with a message naming
  the operator and the argument.

Every check calls the op with its library's output guards on (as under
``OPBRIDGE_CHECK=1``): a kernel that writes outside an output, or leaves its
end unwritten, because its shape rule disagrees with it fails the check with
an error naming the op and the output, instead of corrupting memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
import torch

from opbridge import _dtypes
from opbridge._library import Library, library_for_namespace
from opbridge.ops import Sample
from opbridge.ops.call import OpCall

# The floating dtypes an op may take (supported_dtypes tries each), and the
# tolerance (atol = rtol) check_reference compares the op with its reference
# at, by dtype: a few units in the last place of the dtype's rounding of O(1)
# values, as the built-in operators' dtype tests use; the 16-bit dtypes are
# compared with the reference computed in float64 from the same inputs.
FLOATING_DTYPES = tuple(_dtypes.FLOATING.values())
HALF_DTYPES = _dtypes.HALF
TOLERANCES = {
    torch.float32: 1e-5,
    torch.float64: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
# The ai.onnx opsets export_cases gives check_export: the default, and the
# one where standard forms change (RMSNormalization, RotaryEmbedding), each
# with the exporters that accept it (opbridge.export.OPSET_RANGES).
EXPORT_OPSETS = (18, 23)


def _library(card) -> Library:
    library = library_for_namespace(card.namespace)
    if library is None:
        raise AssertionError(
            f"{card.namespace}::{card.name}: no loaded library has namespace {card.namespace!r} "
            "(load it with opbridge.load_library first)"
        )
    return library


@contextlib.contextmanager
def output_guards(card) -> Iterator[None]:
    """The block's calls of the card's library run with output guards (see
    the module's docstring)."""
    module = _library(card).module
    before = module.output_guards_enabled()
    module.set_output_guards(True)
    try:
        yield
    finally:
        module.set_output_guards(before)


_Check = TypeVar("_Check", bound=Callable[..., None])


def _guarded(check: _Check) -> _Check:
    @functools.wraps(check)
    def run(card, *args, **kwargs):
        with output_guards(card):
            return check(card, *args, **kwargs)

    return run  # type: ignore[return-value]


def _spec(card) -> dict:
    return _library(card).specs()[card.name]


def _samples(card, dtype, requires_grad=False, large=False) -> Iterator:
    return card.samples(dtype, requires_grad, large=large)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def _close(actual, expected, atol: float, rtol: float, what: str) -> None:
    for i, (a, e) in enumerate(zip(_as_tuple(actual), _as_tuple(expected), strict=True)):
        torch.testing.assert_close(
            a, e, atol=atol, rtol=rtol, msg=lambda m, i=i: f"{what}, output {i}: {m}"
        )


def _dtype_name(dtype: torch.dtype) -> str:
    """The dtype as the shape rules name it (``float16``)."""
    return str(dtype).removeprefix("torch.")


def _at_dtype(sample, dtype: torch.dtype):
    """The sample with every floating tensor in ``dtype`` (detached)."""

    def convert(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().to(dtype)
        return value

    return dataclasses.replace(
        sample,
        args=tuple(convert(a) for a in sample.args),
        kwargs={k: convert(v) for k, v in sample.kwargs.items()},
    )


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """``{"atol": ..., "rtol": ...}`` of :data:`TOLERANCES` for ``dtype``."""
    return {"atol": TOLERANCES[dtype], "rtol": TOLERANCES[dtype]}


@_guarded
def check_reference(
    card,
    dtypes=(torch.float32, torch.float64),
    atol: float | None = None,
    rtol: float | None = None,
) -> None:
    """The op equals its card's reference on every sample at each of
    ``dtypes``, within ``atol`` / ``rtol`` (by default the dtype's
    :data:`TOLERANCES`); at a 16-bit dtype the reference runs in float64 on
    the same inputs."""
    for dtype in dtypes:
        tol = TOLERANCES.get(dtype, 1e-5)
        a_tol = tol if atol is None else atol
        r_tol = tol if rtol is None else rtol
        for sample in _samples(card, dtype, large=True):
            what = f"{card.namespace}::{card.name} [{sample!r}, {dtype}]"
            expected = card.reference(*sample.args, **sample.kwargs)
            actual = card.call(*sample.args, **sample.kwargs)
            if dtype in HALF_DTYPES:
                # The outputs' dtypes are the reference's at this dtype; their
                # values are compared with the reference's in float64.
                for i, (a, e) in enumerate(
                    zip(_as_tuple(actual), _as_tuple(expected), strict=True)
                ):
                    assert a.dtype == e.dtype, f"{what}, output {i}: dtype {a.dtype}, not {e.dtype}"
                exact = _at_dtype(sample, torch.float64)
                expected = card.reference(*exact.args, **exact.kwargs)
                actual = tuple(
                    a.double() if a.is_floating_point() else a for a in _as_tuple(actual)
                )
            _close(actual, expected, a_tol, r_tol, what)


@_guarded
def check_opcheck(card) -> None:
    op = _library(card).op(card.name)
    for requires_grad in (False, True):
        for sample in _samples(card, torch.float64, requires_grad):
            torch.library.opcheck(op, sample.args, sample.kwargs)


def _differentiable(sample) -> list[int]:
    return [
        i
        for i, a in enumerate(sample.args)
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad
    ]


@_guarded
def check_gradcheck(card) -> None:
    """float64 ``gradcheck`` of every differentiable input on every sample;
    a wrong backward is an AssertionError naming the op, the sample, the
    input(s) whose gradient differs from the numerical one and, for an op
    with several differentiable outputs, the output(s) whose backward path is
    wrong (torch's Jacobian report follows as its cause)."""
    from torch.autograd.gradcheck import GradcheckError

    for index, sample in enumerate(_samples(card, torch.float64, requires_grad=True)):
        positions = _differentiable(sample)
        if not positions:
            continue

        def fn(*tensors, sample=sample, positions=positions):
            args = list(sample.args)
            for position, tensor in zip(positions, tensors, strict=True):
                args[position] = tensor
            return card.call(*args, **sample.kwargs)

        inputs = tuple(sample.args[p] for p in positions)
        try:
            torch.autograd.gradcheck(fn, inputs)
        except GradcheckError as error:
            raise AssertionError(_gradcheck_failure(card, index, sample, positions, fn)) from error


def _gradcheck_failure(card, index: int, sample, positions: list[int], fn) -> str:
    """Which of the sample's inputs fail gradcheck alone (the others held
    fixed) and, for an op with several differentiable outputs, which
    outputs' backward paths fail it alone (the other outputs dropped), for
    :func:`check_gradcheck`'s message."""
    from torch.autograd.gradcheck import GradcheckError

    try:
        spec = _spec(card)
    except (AssertionError, KeyError):
        spec = {}
    spec_inputs = [i["name"] for i in spec.get("inputs", [])]
    spec_outputs = [o if isinstance(o, str) else o["name"] for o in spec.get("outputs", [])]

    def name(position: int) -> str:
        if position < len(spec_inputs):
            return f"'{spec_inputs[position]}' (argument {position})"
        return f"argument {position}"

    def output_name(k: int) -> str:
        if k < len(spec_outputs):
            return f"'{spec_outputs[k]}' (output {k})"
        return f"output {k}"

    def fails(check, inputs) -> bool:
        try:
            torch.autograd.gradcheck(check, inputs)
        except GradcheckError:
            return True
        return False

    wrong, right = [], []
    for i, position in enumerate(positions):
        fixed = [sample.args[p].detach() for p in positions]

        def alone(tensor, i=i, fixed=fixed):
            return fn(*fixed[:i], tensor, *fixed[i + 1 :])

        (wrong if fails(alone, (sample.args[position],)) else right).append(name(position))
    label = f"sample {index} ({sample!r})" if repr(sample) else f"sample {index}"
    if wrong:
        what = f"the gradient of {', '.join(wrong)} differs from the numerical one"
        if right:
            what += f" (those of {', '.join(right)} agree)"
    else:
        what = "the gradients differ from the numerical ones only with all inputs together"
    inputs = tuple(sample.args[p] for p in positions)
    outputs = _as_tuple(fn(*inputs))
    differentiable = [
        k
        for k, o in enumerate(outputs)
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad
    ]
    if len(differentiable) > 1:
        paths_wrong, paths_right = [], []
        for k in differentiable:

            def only(*tensors, k=k):
                return _as_tuple(fn(*tensors))[k]

            (paths_wrong if fails(only, inputs) else paths_right).append(output_name(k))
        if paths_wrong:
            what += (
                f"; the backward through {', '.join(paths_wrong)} is wrong (gradcheck of that "
                "output alone, the others dropped, fails"
            )
            what += f"; through {', '.join(paths_right)} it agrees)" if paths_right else ")"
        else:
            outs = ", ".join(output_name(k) for k in differentiable)
            what += (
                f"; through each of {outs} alone the gradients agree: they differ only with "
                "every output's gradient together"
            )
    return f"{card.namespace}::{card.name}: gradcheck failed on {label}, float64: {what}"


@_guarded
def check_compile(card) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(card.call, fullgraph=True, dynamic=True)
    for sample in _samples(card, torch.float32, requires_grad=True):
        expected = card.call(*sample.args, **sample.kwargs)
        actual = compiled(*sample.args, **sample.kwargs)
        _close(actual, expected, 1e-5, 1e-5, f"{card.name} compiled [{sample!r}]")
        positions = _differentiable(sample)
        if positions:
            out = _as_tuple(actual)[0]
            grads = torch.autograd.grad(out.sum(), [sample.args[p] for p in positions])
            ref = torch.autograd.grad(
                _as_tuple(expected)[0].sum(), [sample.args[p] for p in positions]
            )
            _close(tuple(grads), tuple(ref), 1e-5, 1e-5, f"{card.name} compiled backward")


def _typical_samples(card) -> Iterator:
    """The float32 samples whose tensors are contiguous and at least 1-D."""
    return (
        s
        for s in _samples(card, torch.float32)
        if all(a.dim() >= 1 and a.is_contiguous() for a in s.args if isinstance(a, torch.Tensor))
    )


def _typical_sample(card):
    """The first float32 sample whose tensors are contiguous and at least 1-D."""
    return next(_typical_samples(card))


def _refuses_dtype(message: str, card, argument: str, dtype: torch.dtype) -> bool:
    """Whether ``message`` is the op's refusal of ``dtype`` for ``argument``."""
    return (
        card.qualified_name in message
        and f"argument '{argument}'" in message
        and f"got {_dtype_name(dtype)}" in message
    )


@_guarded
def supported_dtypes(card) -> tuple[torch.dtype, ...]:
    """The dtypes of :data:`FLOATING_DTYPES` the op takes: its typical
    sample (see :func:`export_sample`) is called with its floating tensors in
    each. An error naming the first input and the dtype (the shape rule's
    dtype check) means the op does not take it; any other error is raised."""
    first = _spec(card)["inputs"][0]["name"]
    sample = _typical_sample(card)
    taken = []
    for dtype in FLOATING_DTYPES:
        call = _at_dtype(sample, dtype)
        try:
            card.call(*call.args, **call.kwargs)
        except RuntimeError as error:
            if not _refuses_dtype(str(error), card, first, dtype):
                raise
        else:
            taken.append(dtype)
    return tuple(taken)


def export_cases(opsets: Iterable[int] = EXPORT_OPSETS) -> list[tuple[str, bool, int]]:
    """``(route, dynamo, opset)`` for :func:`check_export`: every registered
    route (:func:`opbridge.export.routes.routes`), with the dynamo and the
    legacy exporter, at each of ``opsets`` the exporter accepts
    (``opbridge.export.OPSET_RANGES``: the legacy exporter stops at 20)."""
    from opbridge.export import OPSET_RANGES, routes

    cases = []
    for route in routes.routes():
        for dynamo in (True, False):
            low, high = OPSET_RANGES["dynamo" if dynamo else "legacy"]
            cases += [(route, dynamo, opset) for opset in opsets if low <= opset <= high]
    return cases


def runtime_cases() -> list[tuple[str, str]]:
    """``(route, runtime)`` for :func:`check_export` in every runtime but the
    default one whose package is installed here (OpenVINO, a registered
    one): every registered route, exported by the dynamo exporter at opset
    18. A runtime's check needs the op's library built for it (its adapter,
    which the build adds where the runtime's CMake package is found): its
    session says so, naming the library, where it is missing."""
    from opbridge import runtimes
    from opbridge.export import routes

    installed = []
    for name in runtimes.names():
        if name == runtimes.get().name:
            continue
        try:
            runtimes.get(name).version()
        except ImportError:
            continue
        installed.append(name)
    return [(route, name) for name in installed for route in routes.routes()]


def export_case_id(case: tuple[str, bool, int]) -> str:
    """``custom-dynamo-opset18``: a test id for one of :func:`export_cases`."""
    route, dynamo, opset = case
    return f"{route}-{'dynamo' if dynamo else 'legacy'}-opset{opset}"


def export_sample(card, sample=None, *, route: str, dynamo: bool = True, opset: int = 18):
    """Exports one call of the op (the first 2-D or larger float32 sample by
    default); returns ``(proto, module, inputs)``."""
    from opbridge.export import export

    if sample is None:
        sample = _typical_sample(card)
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args)
    module = OpCall(card.call, args, sample.kwargs).eval()
    inputs = tuple(args[p] for p in module.positions)
    proto = export(module, inputs, route=route, dynamo=dynamo, opset=opset, verbose=False)
    return proto, module, inputs


@_guarded
def check_export(
    card, *, route: str, dynamo: bool = True, opset: int = 18, runtime: str | None = None
) -> None:
    """Exports the op's typical sample by ``route``: the checker passes, the
    custom route has exactly the op's node with the spec's attributes, the
    other routes none of the library's nodes, and ``runtime`` (one of
    :func:`opbridge.runtimes.names`, default :data:`opbridge.runtimes.DEFAULT`:
    its plain session, no library registered,
    for the library-free routes, and its session with the library for the
    routes of library nodes: both for ``function``) matches PyTorch within
    1e-5 at its base and its default optimization level."""
    from opbridge import runtimes
    from opbridge.export import routes
    from opbridge.export.contrib import check_model

    chosen = runtimes.get(runtime)
    library = _library(card)
    spec = _spec(card)
    proto, module, inputs = export_sample(card, route=route, dynamo=dynamo, opset=opset)
    check_model(proto, full_check=True)
    custom = [n for n in proto.graph.node if n.domain == library.onnx_domain]
    the_route = routes.get(route)
    if the_route.library_node:
        assert [n.op_type for n in custom] == [spec["onnx_type"]], (
            f"{card.name}: expected one {library.onnx_domain}::{spec['onnx_type']} node, got "
            f"{[(n.domain, n.op_type) for n in proto.graph.node]}"
        )
        names = {a.name for a in custom[0].attribute}
        assert names == {a["name"] for a in spec["attrs"]}, f"{card.name}: attributes {names}"
    else:
        assert not custom, f"{card.name}: the {route} route left {len(custom)} custom nodes"
    expected = _as_tuple(module(*inputs))
    feeds = {i.name: t.numpy() for i, t in zip(proto.graph.input, inputs, strict=False)}
    # A route whose library nodes carry function bodies runs both ways: the
    # bodies in a plain session, the kernels with the library.
    sessions = {}
    if not the_route.needs_library:
        if chosen.plain_session is None:
            raise ValueError(
                f"opbridge.sdk.testing.check_export: the {route} route's model must run without "
                f"the library, and runtime {chosen.name!r} has no plain_session to run it in"
            )
        sessions["plain"] = chosen.plain_session
    if the_route.library_node:
        sessions["library"] = chosen.session
    for level in dict.fromkeys((chosen.base_level, chosen.default_level)):
        for kind, session in sessions.items():
            outputs = session(proto, level=level).run(None, feeds)
            for got, want in zip(outputs, expected, strict=True):
                np.testing.assert_allclose(
                    got,
                    want.detach().numpy(),
                    atol=1e-5,
                    rtol=1e-5,
                    err_msg=f"{card.name}: {route} route, dynamo={dynamo}, {chosen.name} {level}, "
                    f"{kind}",
                )


def _numpy_dtype(dtype) -> np.dtype:
    """A numpy dtype, or a torch one as numpy holds it (bfloat16: ml_dtypes')."""
    if dtype == torch.bfloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if isinstance(dtype, torch.dtype):
        return torch.empty(0, dtype=dtype).numpy().dtype
    return np.dtype(dtype)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy().astype(_numpy_dtype(torch.bfloat16))
    return tensor.numpy()


# ONNX's float, double, float16 and bfloat16 (TensorProto's numbers).
_FLOATING_ELEM_TYPES = (1, 11, 10, 16)


def single_node_model(card, sample, dtypes: dict[int, Any] | None = None):
    """A one-node ONNX model of the op's custom node for ``sample`` (tensor
    inputs as graph inputs; ``dtypes`` overrides an input's dtype, numpy's or
    torch's, by position)."""
    from onnx import helper

    from opbridge.export.nodes import bind

    library = _library(card)
    spec = _spec(card)
    inputs, attrs = bind(spec, sample.args, sample.kwargs)
    feeds = {}
    graph_inputs = []
    names = []
    for position, (param, value) in enumerate(zip(spec["inputs"], inputs, strict=True)):
        if value is None:
            names.append("")
            continue
        array = _numpy(value)
        if dtypes and position in dtypes:
            array = array.astype(_numpy_dtype(dtypes[position]))
        feeds[param["name"]] = array
        names.append(param["name"])
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(helper.make_tensor_value_info(param["name"], elem, list(array.shape)))
    while names and names[-1] == "":
        names.pop()
    # Outputs are declared with the first tensor input's floating dtype (the
    # sample's when the model gives it another type).
    first = next(v for v in inputs if v is not None)
    out_type = graph_inputs[0].type.tensor_type.elem_type
    if out_type not in _FLOATING_ELEM_TYPES:
        out_type = helper.np_dtype_to_tensor_dtype(_numpy(first).dtype)
    outputs = [helper.make_tensor_value_info(o, out_type, None) for o in spec["outputs"]]
    node = helper.make_node(
        spec["onnx_type"], names, list(spec["outputs"]), domain=library.onnx_domain, **attrs
    )
    graph = helper.make_graph([node], f"{card.name}_single_node", graph_inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", 18),
            helper.make_opsetid(library.onnx_domain, library.domain_version),
        ],
    )
    model.ir_version = 10
    return model, feeds


@dataclasses.dataclass(frozen=True)
class BadInput:
    """One call the op must refuse, in PyTorch and in ONNX Runtime, with a
    message naming the op and ``argument``.

    - ``what``: the case, for messages and test ids (``int32 x``);
    - ``sample``: the PyTorch call;
    - ``onnx_sample`` and ``onnx_dtypes``: the one-node ONNX model's call
      (:func:`single_node_model`) and its inputs' dtypes by position.
    """

    what: str
    argument: str
    sample: Sample
    onnx_sample: Sample
    onnx_dtypes: Mapping[int, Any] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        return self.what


def _with_argument(spec: dict, sample, name: str, value):
    """The sample with its argument ``name`` (an input or an attribute, by
    the spec's names) set to ``value``: in place when it is passed by
    position, as a keyword otherwise."""
    names = [p["name"] for p in spec["inputs"]] + [a["name"] for a in spec["attrs"]]
    position = names.index(name)
    if position < len(sample.args):
        args = (*sample.args[:position], value, *sample.args[position + 1 :])
        return dataclasses.replace(sample, args=args)
    return dataclasses.replace(sample, kwargs={**sample.kwargs, name: value})


def bad_inputs(card, invalid_attrs: Mapping[str, Iterable] | None = None) -> list[BadInput]:
    """The calls :func:`check_bad_input` checks are refused, from the op's
    typical sample:

    - its first input as int32;
    - its second tensor input in float64, the first being float32 (from the
      first such sample that has a second tensor input; none when no sample
      has one);
    - its floating inputs in each dtype of :data:`FLOATING_DTYPES` that
      :func:`supported_dtypes` finds the op does not take;
    - each value of ``invalid_attrs`` (attribute name -> values the op must
      refuse, e.g. ``{"cap": [0.0, float("nan")]}``) for its attribute: only
      the caller knows which values are invalid, so without it there is none.
    """
    spec = _spec(card)
    inputs = [p["name"] for p in spec["inputs"]]
    attrs = [a["name"] for a in spec["attrs"]]
    sample = _typical_sample(card)
    first = sample.args[0]
    cases = [
        BadInput(
            f"int32 {inputs[0]}",
            inputs[0],
            _with_argument(spec, sample, inputs[0], torch.ones(first.shape, dtype=torch.int32)),
            sample,
            {0: np.int32},
        )
    ]
    from opbridge.export.nodes import bind

    # The first such sample with a second floating tensor input (an optional
    # one may be absent from the typical sample).
    for mixed in _typical_samples(card):
        tensors, _ = bind(spec, mixed.args, mixed.kwargs)
        second = next(
            (
                position
                for position, value in enumerate(tensors)
                if position > 0 and isinstance(value, torch.Tensor) and value.is_floating_point()
            ),
            None,
        )
        if second is not None and tensors[0].dtype == torch.float32:
            name = inputs[second]
            cases.append(
                BadInput(
                    f"float64 {name} with a float32 {inputs[0]}",
                    name,
                    _with_argument(spec, mixed, name, tensors[second].detach().double()),
                    mixed,
                    {second: np.float64},
                )
            )
            break
    tensors, _ = bind(spec, sample.args, sample.kwargs)
    taken = supported_dtypes(card)
    floating = [
        position
        for position, value in enumerate(tensors)
        if isinstance(value, torch.Tensor) and value.is_floating_point()
    ]
    for dtype in FLOATING_DTYPES:
        if dtype not in taken:
            cases.append(
                BadInput(
                    f"{_dtype_name(dtype)} {inputs[0]}",
                    inputs[0],
                    _at_dtype(sample, dtype),
                    sample,
                    dict.fromkeys(floating, dtype),
                )
            )
    for name, values in (invalid_attrs or {}).items():
        if name not in attrs:
            raise AssertionError(
                f"{card.qualified_name}: invalid_attrs names {name!r}, not one of its "
                f"attributes {attrs}"
            )
        for value in values:
            call = _with_argument(spec, sample, name, value)
            cases.append(BadInput(f"{name}={value!r}", name, call, call))
    return cases


def _ort_run(session, feeds: dict) -> None:
    """Runs the session on numpy feeds (bfloat16 ones as OrtValues)."""
    import onnxruntime
    from onnx import TensorProto

    bfloat16 = _numpy_dtype(torch.bfloat16)
    if not any(a.dtype == bfloat16 for a in feeds.values()):
        session.run(None, feeds)
        return
    values = {}
    for name, array in feeds.items():
        if array.dtype == bfloat16:
            bits = np.ascontiguousarray(array).view(np.uint16)
            values[name] = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                bits, TensorProto.BFLOAT16
            )
        else:
            values[name] = onnxruntime.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
    session.run_with_ort_values([o.name for o in session.get_outputs()], values)


@_guarded
def check_refused(card, bad: BadInput) -> None:
    """``bad`` (one of :func:`bad_inputs`) is refused by the op in PyTorch
    and by its node in ONNX Runtime, each with an error whose message names
    the op and the argument."""
    from opbridge.runtimes.onnxruntime import InferenceSession

    torch_name = card.qualified_name
    argument = f"argument '{bad.argument}'"
    try:
        card.call(*bad.sample.args, **bad.sample.kwargs)
    except (RuntimeError, ValueError) as error:
        message = str(error)
        assert torch_name in message and argument in message, (
            f"{torch_name}: {bad.what} was refused in PyTorch without naming the op and "
            f"{argument}: {message}"
        )
    else:
        raise AssertionError(f"{torch_name}: {bad.what} was accepted in PyTorch")
    model, feeds = single_node_model(card, bad.onnx_sample, dtypes=dict(bad.onnx_dtypes))
    buffer = io.BytesIO(model.SerializeToString())
    try:
        _ort_run(InferenceSession(buffer.getvalue()), feeds)
    except Exception as error:  # ONNX Runtime's Fail / InvalidArgument
        message = str(error)
        assert torch_name in message and argument in message, (
            f"{torch_name}: {bad.what} was refused in ONNX Runtime without naming the op and "
            f"{argument}: {message}"
        )
    else:
        raise AssertionError(f"{torch_name}: {bad.what} was accepted in ONNX Runtime")


def check_bad_input(card, invalid_attrs: Mapping[str, Iterable] | None = None) -> None:
    """Every one of :func:`bad_inputs` (``invalid_attrs``: attribute name ->
    values the op must refuse) is refused (:func:`check_refused`)."""
    for bad in bad_inputs(card, invalid_attrs):
        check_refused(card, bad)


_DOMAIN_VALUES = {"-inf": float("-inf"), "+inf": float("inf"), "nan": float("nan")}


@_guarded
def check_value_domains(card, values: Mapping[str, Iterable[str]] | None = None) -> None:
    """The op takes every non-finite value its spec declares for an input
    (``.Values("x", kNegInfValues)``: ``Library.specs()[op]["values"]``) and
    computes what its reference does with it: for each declared value, the
    typical float32 sample with every third element of that input (along
    its flattened data, the first included) set to it, compared with the
    reference within float32's tolerance, NaN where the reference gives NaN.
    An op that declares no value for any input passes. ``values`` (input
    name -> ``"-inf"``, ``"+inf"``, ``"nan"``) tries those instead of the
    declared ones."""
    spec = _spec(card)
    inputs = {p["name"] for p in spec["inputs"]}
    sample = _typical_sample(card)
    tol = TOLERANCES[torch.float32]
    declared = spec.get("values", {}) if values is None else values
    for tensor, taken in sorted(declared.items()):
        if tensor not in inputs:
            continue
        position = [p["name"] for p in spec["inputs"]].index(tensor)
        if position >= len(sample.args) or not isinstance(sample.args[position], torch.Tensor):
            continue
        for value in taken:
            data = sample.args[position].detach().clone()
            data.view(-1)[::3] = _DOMAIN_VALUES[value]
            case = _with_argument(spec, sample, tensor, data)
            what = f"{card.namespace}::{card.name} with {value} in {tensor!r} ({sample!r})"
            expected = card.reference(*case.args, **case.kwargs)
            actual = card.call(*case.args, **case.kwargs)
            for i, (a, e) in enumerate(zip(_as_tuple(actual), _as_tuple(expected), strict=True)):
                torch.testing.assert_close(
                    a,
                    e,
                    atol=tol,
                    rtol=tol,
                    equal_nan=True,
                    msg=lambda m, i=i, what=what: f"{what}, output {i}: {m}",
                )


def _package_of(card) -> str:
    """The package whose import loads the card's library (and registers its
    cards): the top-level package of the library's extension module."""
    return _library(card).module.__name__.partition(".")[0]


_UNDER_CHECK = """
import importlib, json, sys

import opbridge
from opbridge.sdk import testing

importlib.import_module(sys.argv[1])
card = opbridge.ops.cards()[sys.argv[2]]
library = testing._library(card)
assert library.module.runtime_checks_enabled(), f"{library.name}: OPBRIDGE_CHECK is off"
testing.check_value_domains(card, json.loads(sys.argv[3]))
"""


def check_value_domains_under_check(
    card, values: Mapping[str, Iterable[str]] | None = None, *, timeout: float = 300
) -> None:
    """:func:`check_value_domains` in a fresh Python process under
    ``OPBRIDGE_CHECK=1``, which a library reads when it loads: there the
    adapters scan every input and output for non-finite values and refuse
    one the spec does not declare (``.Values``), so each declared value must
    pass that scan and still give the reference's results. The process
    imports the package that loads the card's library (:func:`_package_of`)
    and sees this process's ``sys.path``; ``values`` as for
    :func:`check_value_domains`. Raises ``AssertionError`` with the child's
    error when it fails."""
    import json
    import os
    import subprocess
    import sys

    asked = None if values is None else {name: list(v) for name, v in values.items()}
    env = {
        **os.environ,
        "OPBRIDGE_CHECK": "1",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _UNDER_CHECK,
            _package_of(card),
            f"{card.namespace}::{card.name}",
            json.dumps(asked),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise AssertionError(
            f"{card.namespace}::{card.name}: value domains under OPBRIDGE_CHECK=1: "
            + (lines[-1] if lines else f"exit {result.returncode}")
            + "\n"
            + "\n".join(lines[-25:])
        )


def package_cards(package: str) -> list:
    """The cards of every operator of the opbridge libraries an installed
    package loads when imported (``my_fused_ops``: its ``myops::*`` ops).
    Raises ``LookupError`` when it loads none, ``AssertionError`` when an op
    of its libraries has no card."""
    import importlib

    from opbridge._library import libraries
    from opbridge.ops import cards

    importlib.import_module(package)
    mine = [
        library
        for library in libraries()
        if library.module.__name__.partition(".")[0] == package.partition(".")[0]
    ]
    if not mine:
        raise LookupError(f"opbridge.sdk.testing: importing {package} loads no opbridge library")
    namespaces = {library.torch_namespace for library in mine}
    found = [card for card in cards().values() if card.namespace in namespaces]
    ops = {name for library in mine for name in library.specs()}
    missing = sorted(ops - {card.name for card in found})
    assert not missing, f"{package}: ops without a card (opbridge.ops.register_card): {missing}"
    return sorted(found, key=lambda card: (card.namespace, card.name))


# What check_package runs on each op, in order.
PACKAGE_CHECKS: dict[str, Callable] = {
    "reference": check_reference,
    "opcheck": check_opcheck,
    "gradcheck": check_gradcheck,
    "torch.compile": check_compile,
    "custom route in ONNX Runtime": functools.partial(check_export, route="custom"),
}


def check_package(package: str, *, log: Callable[[str], None] = print) -> None:
    """Every check of :data:`PACKAGE_CHECKS` on every op of
    :func:`package_cards`: what to run where a package's wheel is installed
    (``opbridge check-op PACKAGE``). ``log`` gets the PyTorch library each
    namespace loaded and why, then one line per op and check; every failure
    is collected, then raised in one ``AssertionError``."""
    import time

    found = package_cards(package)
    for namespace in sorted({card.namespace for card in found}):
        adapter = library_for_namespace(namespace).torch_adapter
        log(f"{namespace}: torch {torch.__version__}, {adapter.library.name} ({adapter.reason})")
    failures = []
    for card in found:
        for name, check in PACKAGE_CHECKS.items():
            start = time.perf_counter()
            try:
                check(card)
            except Exception as error:
                failures.append(f"{card.namespace}::{card.name}: {name}: {error}")
                outcome = "FAILED"
            else:
                outcome = "ok"
            took = time.perf_counter() - start
            log(f"{card.namespace}::{card.name}: {name} {outcome} ({took:.1f} s)")
    if failures:
        raise AssertionError(f"{package}: {len(failures)} checks failed:\n" + "\n".join(failures))
