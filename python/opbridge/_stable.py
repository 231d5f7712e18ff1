"""The Python half of an operator library built on LibTorch's stable ABI
(``OPBRIDGE_TORCH_STABLE_ABI=ON``, ``csrc/torch_adapter/stable_adapter.cpp``).

The stable C API registers the schemas and the CPU kernels (the op, its out=
form and its backward) but has neither symbolic sizes nor autograd. This
module adds, once the C++ registration has succeeded, what the generic C++
adapter registers itself:

- fake kernels (``torch.library.register_fake``) from the spec's shape rules,
  which the extension module exposes (``infer``, ``infer_backward``), with
  symbolic sizes passed through, for torch.compile and torch.export with
  dynamic shapes;
- the autograd kernels (the ``Autograd`` dispatch key): the op under an
  autograd node calling the backward op when an input requires grad, the op
  alone otherwise; an error naming the op where the spec declares no
  backward, and an error for a gradient of the backward;
- the out= form's refusal of inputs that require grad.

It also finds the names PyTorch already has, which the stable ABI cannot look
up, for ``opbridge.load_library``'s all-or-nothing check.
"""

from __future__ import annotations

from types import ModuleType

import torch

from opbridge import _dtypes
from opbridge._schema import schema_order


def _schema_name(schema: str) -> str:
    return schema.split("(", 1)[0]


def taken_elsewhere(namespace: str, specs: dict[str, dict]) -> list[str]:
    """The operators and overloads of ``specs`` PyTorch already has."""
    taken = []
    for name, spec in specs.items():
        wanted = [(name, ""), (name, "out")]
        if spec["backward"] is not None:
            wanted.append((_schema_name(spec["backward_schema"]), ""))
        for op, overload in wanted:
            try:
                torch._C._dispatch_find_schema_or_throw(f"{namespace}::{op}", overload)
            except RuntimeError:
                continue
            taken.append(f"{namespace}::{op}" + (f".{overload}" if overload else ""))
    return taken


def _infos(tensors) -> list[tuple[bool, str, list]]:
    # Each size an int or a torch.SymInt: the shape rule computes symbolic
    # output sizes from symbolic ones (opbridge/dim.h).
    return [
        (False, "", [])
        if tensor is None
        else (True, _dtypes.NAMES.get(tensor.dtype, str(tensor.dtype)), list(tensor.shape))
        for tensor in tensors
    ]


def _sizes(op: str, output: str, shape: list) -> list:
    for d, size in enumerate(shape):
        if isinstance(size, int) and size < 0:
            raise RuntimeError(
                f"{op}: the shape rule gives output '{output}' the unknown dimension {d} "
                f"({['?' if isinstance(s, int) and s < 0 else s for s in shape]}) for symbolic "
                "input sizes; compute the size from the inputs' Dims instead (say f * (f - 1) / 2 "
                "from const Dim f = inputs[0].shape[1]; opbridge/dim.h), which PyTorch then "
                "follows symbolically"
            )
    return shape


def _binder(overload):
    """Turns a kernel's (args, kwargs) into every argument in schema order:
    PyTorch leaves out trailing arguments equal to their defaults."""
    arguments = overload._schema.arguments

    def missing(name: str) -> Exception:
        return RuntimeError(f"{overload}: argument '{name}' is missing")

    def bind(args, kwargs) -> list:
        return schema_order(arguments, args, kwargs, missing)

    return bind


def _like(tensors):
    return next(t for t in tensors if t is not None)


def _ruled(rule, *args):
    # The rules raise ValueError; the C++ kernels raise RuntimeError.
    try:
        return rule(*args)
    except ValueError as error:
        raise RuntimeError(str(error)) from None


def _one_or_tuple(values: list):
    return values[0] if len(values) == 1 else tuple(values)


def _forward_fake(
    module: ModuleType, op: str, name: str, n_inputs: int, output_names: list[str], bind
):
    def fake(*args, **kwargs):
        args = bind(args, kwargs)
        tensors = args[:n_inputs]
        outputs = _ruled(module.infer, name, _infos(tensors), list(args[n_inputs:]))
        like = _like(tensors)
        return _one_or_tuple(
            [
                like.new_empty(_sizes(op, output, shape), dtype=_dtypes.TORCH[dtype])
                for output, (dtype, shape) in zip(output_names, outputs, strict=True)
            ]
        )

    return fake


def _out_fake(module: ModuleType, op: str, name: str, n_inputs: int, out_names: list[str], bind):
    def fake(*args, **kwargs):
        args = bind(args, kwargs)
        tensors = args[:n_inputs]
        attrs, outs = args[n_inputs : -len(out_names)], args[-len(out_names) :]
        outputs = _ruled(module.infer, name, _infos(tensors), attrs)
        like = _like(tensors)
        for out, argument, (dtype, shape) in zip(outs, out_names, outputs, strict=True):
            if out.dtype != _dtypes.TORCH[dtype]:
                raise RuntimeError(
                    f"{op}.out: argument '{argument}' must be {dtype}, got "
                    f"{_dtypes.NAMES.get(out.dtype)}"
                )
            if out.device != like.device:
                raise RuntimeError(
                    f"{op}.out: argument '{argument}' must be on {like.device} like the inputs, "
                    f"got {out.device}"
                )
            out.resize_(_sizes(op, argument, shape))
        return _one_or_tuple(outs)

    return fake


def _backward_fake(module: ModuleType, op: str, name: str, backward: dict, bind):
    n_inputs = len(backward["inputs"])
    optional = backward["optional_outputs"]

    def fake(*args, **kwargs):
        args = bind(args, kwargs)
        tensors = args[:n_inputs]
        attrs = list(args[n_inputs:-1])
        mask = args[-1]
        if len(mask) != len(optional):
            raise RuntimeError(
                f"{name}_backward: output_mask must have {len(optional)} entries, got {len(mask)}"
            )
        outputs = _ruled(module.infer_backward, name, _infos(tensors), attrs)
        like = _like(tensors)
        return _one_or_tuple(
            [
                like.new_empty(
                    _sizes(op, backward["outputs"][o], shape)
                    if mask[o] or not optional[o]
                    else [0],
                    dtype=_dtypes.TORCH[dtype],
                )
                for o, (dtype, shape) in enumerate(outputs)
            ]
        )

    return fake


# The dispatcher's autograd-key kernels below are Python functions called on
# every call of an op (the stable ABI can neither register a C++ autograd
# kernel that redispatches nor read requires_grad). Their common case, no
# gradient to record, is kept to two C calls and a redispatch: the
# dispatcher's own keys, less the autograd ones, straight to the CPU kernel.
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
_grad_enabled = torch._C.is_grad_enabled
_any_requires_grad = torch._C._any_requires_grad


def _function(name: str, redispatch, setup_context, formula) -> type:
    """An autograd.Function whose forward runs the op below autograd (the
    dispatch key set comes first among its arguments, and gets no gradient)."""

    def forward(ctx, keyset, *args):
        with torch._C._AutoDispatchBelowAutograd():
            result = redispatch(keyset & _BELOW_AUTOGRAD, *args)
        setup_context(ctx, args, result)
        return result

    def backward(ctx, *grads):
        return (None, *formula(ctx, *grads))

    return type(
        name,
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


def _autograd_kernel(overload, setup_context, formula):
    """The Autograd-key kernel of ``overload``: the op under an autograd node
    (``formula`` its backward) when grad mode is on and an input requires
    grad, else the op itself."""
    redispatch = overload._handle.redispatch_boxed
    name = overload._schema.name.replace("::", "_")  # grad_fn: <namespace>_<op>Backward
    apply = _function(name, redispatch, setup_context, formula).apply

    def kernel(keyset, *args):
        if _grad_enabled() and _any_requires_grad(*args):
            return apply(keyset, *args)
        return redispatch(keyset & _BELOW_AUTOGRAD, *args)

    return kernel


def _autograd(backward_op, spec: dict, bind):
    backward = spec["backward"]
    n_inputs = len(spec["inputs"])
    input_grads = backward["input_grads"]
    sources = backward["inputs"]
    n_grads = len(backward["outputs"])

    def setup_context(ctx, inputs, output):
        ctx.given = len(inputs)
        inputs = bind(inputs, {})
        outputs = output if isinstance(output, tuple) else (output,)
        saved = [
            inputs[s["index"]] if s["source"] == "input" else outputs[s["index"]]
            for s in sources
            if s["source"] != "grad_output"
        ]
        ctx.save_for_backward(*saved)
        ctx.attrs = tuple(inputs[n_inputs:])
        ctx.present = [inputs[i] is not None for i in range(n_inputs)]

    def formula(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        args = [grads[s["index"]] if s["source"] == "grad_output" else next(saved) for s in sources]
        # needs_input_grad[0] is the dispatch key set's.
        needed = [
            ctx.present[i] and input_grads[i] >= 0 and i < ctx.given and ctx.needs_input_grad[1 + i]
            for i in range(n_inputs)
        ]
        mask = [False] * n_grads
        for i in range(n_inputs):
            if needed[i]:
                mask[input_grads[i]] = True
        results = backward_op(*args, *ctx.attrs, mask)
        results = results if isinstance(results, tuple) else (results,)
        gradients = [results[input_grads[i]] if needed[i] else None for i in range(n_inputs)]
        # One gradient per argument given (the trailing defaults left out).
        return (*gradients, *([None] * len(ctx.attrs)))[: ctx.given]

    return formula, setup_context


def _no_context(ctx, inputs, output):
    pass


def _refuse(message: str):
    def formula(ctx, *grads):
        raise RuntimeError(message)

    return formula


def _out_autograd(op_out, op: str, input_names: list[str]):
    redispatch = op_out._handle.redispatch_boxed

    def kernel(keyset, *args, **kwargs):
        if _grad_enabled() and _any_requires_grad(*args[: len(input_names)]):
            for argument, value in zip(input_names, args, strict=False):
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    raise RuntimeError(
                        f"{op}.out: the out= form does not support automatic differentiation, but "
                        f"argument '{argument}' requires grad (call it without out=, or under "
                        "torch.no_grad())"
                    )
        result = redispatch(keyset & _BELOW_AUTOGRAD, *args, **kwargs)
        for out in result if isinstance(result, tuple) else (result,):
            torch.autograd.graph.increment_version(out)
        return result

    return kernel


# The torch.library.Library objects and handles of the registrations, kept
# for the process's life (as the C++ registrations are).
_KEPT: list = []


def register(module: ModuleType, namespace: str, specs: dict[str, dict]) -> None:
    """Registers the fake kernels and autograd of a stable-ABI library whose
    C++ registration (schemas and CPU kernels) has succeeded."""
    ops = getattr(torch.ops, namespace)
    impl = torch.library.Library(namespace, "IMPL")
    _KEPT.append(impl)
    for name, spec in specs.items():
        op = f"{namespace}::{name}"
        n_inputs = len(spec["inputs"])
        out_names = [
            argument.name
            for argument in getattr(ops, name).out._schema.arguments
            if argument.alias_info is not None and argument.alias_info.is_write
        ]
        forward = getattr(ops, name)
        _KEPT.append(
            torch.library.register_fake(
                op,
                _forward_fake(
                    module, op, name, n_inputs, spec["outputs"], _binder(forward.default)
                ),
            )
        )
        _KEPT.append(
            torch.library.register_fake(
                f"{op}.out", _out_fake(module, op, name, n_inputs, out_names, _binder(forward.out))
            )
        )
        impl.impl(
            f"{name}.out",
            _out_autograd(forward.out, op, [i["name"] for i in spec["inputs"]]),
            "Autograd",
            with_keyset=True,
        )
        backward = spec["backward"]
        if backward is None:
            refuse = _refuse(f"{op} has no backward: its spec declares none")
            impl.impl(
                name,
                _autograd_kernel(forward.default, _no_context, refuse),
                "Autograd",
                with_keyset=True,
            )
            continue
        backward_name = _schema_name(spec["backward_schema"])
        backward_op = getattr(ops, backward_name).default
        _KEPT.append(
            torch.library.register_fake(
                f"{namespace}::{backward_name}",
                _backward_fake(module, op, name, backward, _binder(backward_op)),
            )
        )
        formula, setup_context = _autograd(backward_op, spec, _binder(forward.default))
        impl.impl(
            name,
            _autograd_kernel(forward.default, setup_context, formula),
            "Autograd",
            with_keyset=True,
        )
        refuse = _refuse(f"{op}: double backward (a gradient of its gradient) is not supported")
        impl.impl(
            backward_name,
            _autograd_kernel(backward_op, _no_context, refuse),
            "Autograd",
            with_keyset=True,
        )
