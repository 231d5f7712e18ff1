"""The checks every operator gets, for any operator with a card: opbridge's
own and a user's (``opbridge new-op`` generates a test file that calls them).

Each ``check_*`` function raises ``AssertionError`` (or the error it met)
when the operator fails it:

- :func:`check_reference`: the op equals its card's pure PyTorch reference
  on every sample (float32 and float64);
- :func:`check_opcheck`: ``torch.library.opcheck`` (schema, fake tensors,
  autograd registration, AOT dispatch) on every sample;
- :func:`check_gradcheck`: float64 ``gradcheck`` of every differentiable input;
- :func:`check_compile`: ``torch.compile(fullgraph=True)`` forward and backward;
- :func:`check_export`: export by a route with either exporter, then ONNX
  Runtime equal to PyTorch at ``ORT_DISABLE_ALL`` and ``ORT_ENABLE_ALL``,
  with the node types the route promises;
- :func:`check_bad_input`: an integer input is refused in PyTorch and in ONNX
  Runtime with a message naming the operator and the argument.

Every check calls the op with its library's output guards on (as under
``OPBRIDGE_CHECK=1``): a kernel that writes outside an output, or leaves its
end unwritten, because its shape rule disagrees with it fails the check with
an error naming the op and the output, instead of corrupting memory.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch

from opbridge._library import Library, library_for_namespace
from opbridge.ops.call import OpCall


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
    the module's docstring); a library built by an older SDK has none."""
    module = _library(card).module
    switch = getattr(module, "set_output_guards", None)
    if switch is None:
        yield
        return
    before = module.output_guards_enabled()
    switch(True)
    try:
        yield
    finally:
        switch(before)


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


@_guarded
def check_reference(card, dtypes=(torch.float32, torch.float64), atol=1e-5, rtol=1e-5) -> None:
    for dtype in dtypes:
        for sample in _samples(card, dtype, large=True):
            expected = card.reference(*sample.args, **sample.kwargs)
            actual = card.call(*sample.args, **sample.kwargs)
            _close(
                actual, expected, atol, rtol, f"{card.namespace}::{card.name} [{sample!r}, {dtype}]"
            )


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
    a wrong backward is an AssertionError naming the op, the sample and the
    input(s) whose gradient differs from the numerical one (torch's Jacobian
    report follows as its cause)."""
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
    fixed), for :func:`check_gradcheck`'s message."""
    from torch.autograd.gradcheck import GradcheckError

    try:
        spec_inputs = [i["name"] for i in _spec(card)["inputs"]]
    except (AssertionError, KeyError):
        spec_inputs = []

    def name(position: int) -> str:
        if position < len(spec_inputs):
            return f"'{spec_inputs[position]}' (argument {position})"
        return f"argument {position}"

    wrong, right = [], []
    for i, position in enumerate(positions):
        fixed = [sample.args[p].detach() for p in positions]

        def alone(tensor, i=i, fixed=fixed):
            return fn(*fixed[:i], tensor, *fixed[i + 1 :])

        try:
            torch.autograd.gradcheck(alone, (sample.args[position],))
        except GradcheckError:
            wrong.append(name(position))
        else:
            right.append(name(position))
    label = f"sample {index} ({sample!r})" if repr(sample) else f"sample {index}"
    if wrong:
        what = f"the gradient of {', '.join(wrong)} differs from the numerical one"
        if right:
            what += f" (those of {', '.join(right)} agree)"
    else:
        what = "the gradients differ from the numerical ones only with all inputs together"
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


def _typical_sample(card):
    """The first float32 sample whose tensors are contiguous and at least 1-D."""
    return next(
        s
        for s in _samples(card, torch.float32)
        if all(a.dim() >= 1 and a.is_contiguous() for a in s.args if isinstance(a, torch.Tensor))
    )


def export_sample(card, sample=None, *, route: str, dynamo: bool = True, opset: int = 18):
    """Exports one call of the op (the first 2-D or larger float32 sample by
    default); returns ``(proto, module, inputs)``."""
    from opbridge.export import export

    if sample is None:
        sample = _typical_sample(card)
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args)
    module = OpCall(card.call, args, sample.kwargs)
    inputs = tuple(args[p] for p in module.positions)
    proto = export(module, inputs, route=route, dynamo=dynamo, opset=opset)
    return proto, module, inputs


@_guarded
def check_export(card, *, route: str, dynamo: bool = True, opset: int = 18) -> None:
    """Exports the op's typical sample by ``route``: the checker passes, the
    custom route has exactly the op's node with the spec's attributes, the
    other routes none of the library's nodes, and ONNX Runtime (a stock
    session for the library-free routes, and one with the library for the
    routes of library nodes: both for ``function``) matches PyTorch within
    1e-5 with graph optimizations off and on."""
    import onnxruntime

    from opbridge.export import routes
    from opbridge.ops.contrib import check_model
    from opbridge.runtimes.onnxruntime import OPTIMIZATION_LEVELS, InferenceSession

    library = _library(card)
    spec = _spec(card)
    proto, module, inputs = export_sample(card, route=route, dynamo=dynamo, opset=opset)
    check_model(proto, full_check=True)
    custom = [n for n in proto.graph.node if n.domain == library.onnx_domain]
    needs_library = routes.get(route).needs_library
    if routes.get(route).library_node:
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
    # bodies in a stock session, the kernels with the library.
    kinds = ["stock"] if not needs_library else []
    if routes.get(route).library_node:
        kinds.append("library")
    for level in ("disable_all", "enable_all"):
        for kind in kinds:
            if kind == "stock":
                options = onnxruntime.SessionOptions()
                options.graph_optimization_level = getattr(
                    onnxruntime.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level]
                )
                session = onnxruntime.InferenceSession(
                    proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            else:
                session = InferenceSession(proto, optimization_level=level)
            outputs = session.run(None, feeds)
            for got, want in zip(outputs, expected, strict=True):
                np.testing.assert_allclose(
                    got,
                    want.detach().numpy(),
                    atol=1e-5,
                    rtol=1e-5,
                    err_msg=f"{card.name}: {route} route, dynamo={dynamo}, {level}, {kind}",
                )


def single_node_model(card, sample, dtypes: dict[int, Any] | None = None):
    """A one-node ONNX model of the op's custom node for ``sample`` (tensor
    inputs as graph inputs; ``dtypes`` overrides an input's numpy dtype)."""
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
        array = value.detach().numpy()
        if dtypes and position in dtypes:
            array = array.astype(dtypes[position])
        feeds[param["name"]] = array
        names.append(param["name"])
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(helper.make_tensor_value_info(param["name"], elem, list(array.shape)))
    while names and names[-1] == "":
        names.pop()
    # Outputs are declared with the sample's first tensor's dtype.
    first = next(v for v in inputs if v is not None)
    out_type = helper.np_dtype_to_tensor_dtype(first.detach().numpy().dtype)
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


@_guarded
def check_bad_input(card) -> None:
    from opbridge.runtimes.onnxruntime import InferenceSession

    spec = _spec(card)
    first = spec["inputs"][0]["name"]
    torch_name = f"{card.namespace}::{card.name}"
    sample = _typical_sample(card)
    args = list(sample.args)
    args[0] = torch.ones(args[0].shape, dtype=torch.int32)
    try:
        card.call(*args, **sample.kwargs)
    except RuntimeError as error:
        message = str(error)
        assert torch_name in message and f"argument '{first}'" in message, message
    else:
        raise AssertionError(f"{torch_name}: an int32 '{first}' was accepted in PyTorch")
    model, feeds = single_node_model(card, sample, dtypes={0: np.int32})
    buffer = io.BytesIO(model.SerializeToString())
    try:
        InferenceSession(buffer.getvalue()).run(None, feeds)
    except Exception as error:  # ONNX Runtime's Fail / InvalidArgument
        message = str(error)
        assert f"argument '{first}'" in message, message
    else:
        raise AssertionError(f"{torch_name}: an int32 '{first}' was accepted in ONNX Runtime")
