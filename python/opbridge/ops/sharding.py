"""DTensor sharding strategies for the operators, generated from their cards'
layouts (:class:`opbridge.ops.Layout`).

Every card's op gets one strategy for each of its overloads (the op and its
``out=`` form) and for its backward op ``<name>_backward``: the tensors
replicated, or one dimension letter of the layout sharded on a mesh
dimension in every tensor that has it. An input without that letter, or
broadcast along it (size 1), is replicated; a backward output without it (a
weight's gradient under a sharded batch or sequence) is a partial sum; a
forward output without it is no strategy. Letters in ``Layout.whole`` are
never sharded. A card without a layout gets the replicated strategy only.

Nothing is imported from ``torch.distributed.tensor`` (a second to import)
until a program imports it: the strategies are registered then, or at once
when it is imported already; where ``torch.distributed`` is unavailable
nothing happens. A strategy registered by someone else for an op (with
``torch.distributed.tensor.experimental.register_sharding``) is kept.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from opbridge._imports import WaitingFinder, when_imported
from opbridge._library import ON_LOAD, Library, library_for_namespace
from opbridge.ops._card import _ON_REGISTER, Card, Layout, cards

DTENSOR_MODULE = "torch.distributed.tensor"
ELLIPSIS = "..."

_LOCK = threading.RLock()
_ACTIVE = False  # torch.distributed.tensor is imported and strategies registered
_OURS: set[Any] = set()  # the op overloads whose strategies are ours
_PLANS: dict[Any, Plan] = {}  # op overload -> its plan


class LayoutError(ValueError):
    """A card's layout does not fit its op or the tensors it was given."""


@dataclass(frozen=True)
class Plan:
    """What one op overload's tensors stand for in its card's layout.

    ``args``: each tensor argument's name -> the tensor of the layout whose
    dimensions it has; ``outputs``: the same for each return; ``out_args``:
    the ``out=`` arguments, one per return; ``gradient``: a backward op,
    whose outputs may be partial sums.
    """

    card: Card
    op: Any
    args: dict[str, str]
    outputs: tuple[str, ...]
    out_args: tuple[str, ...] = ()
    gradient: bool = False

    @property
    def name(self) -> str:
        return str(self.op)


def _is_tensor(argument) -> bool:
    kind = argument.type
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch.TensorType)


def _spec(card: Card) -> dict | None:
    library = library_for_namespace(card.namespace)
    return library.specs().get(card.name) if library is not None else None


def _forward_outputs(card: Card, op) -> tuple[str, ...]:
    spec = _spec(card)
    if spec is not None:
        return tuple(spec["outputs"])
    returns = op._schema.returns
    if len(returns) == 1:
        return (returns[0].name or "output",)
    return tuple(r.name or f"output{k}" for k, r in enumerate(returns))


def _from_spec(
    spec: dict | None, outputs: tuple[str, ...]
) -> tuple[dict[str, str], tuple[str, ...]] | None:
    """From the spec's backward (its ``backward`` entry; an op without a
    backward has none): each backward input -> the forward tensor it
    stands for, and for each backward output the forward input whose gradient
    it is (the first, where several share one: x and residual)."""
    backward = (spec or {}).get("backward")
    if not backward:
        return None
    forward_inputs = [i["name"] for i in spec["inputs"]]
    stands_for = {}
    for entry in backward["inputs"]:
        names = outputs if entry["source"] in ("grad_output", "output") else forward_inputs
        if not 0 <= entry["index"] < len(names):
            return None
        stands_for[entry["name"]] = names[entry["index"]]
    gradients = []
    for k, _name in enumerate(backward["outputs"]):
        owners = [forward_inputs[j] for j, g in enumerate(backward["input_grads"]) if g == k]
        if not owners:
            return None
        gradients.append(owners[0])
    return stands_for, tuple(gradients)


def plans(card: Card) -> list[Plan]:
    """A plan for each overload of the card's op and of its backward op;
    none while the op is not registered (its library not loaded)."""
    try:
        packet = getattr(getattr(torch.ops, card.namespace), card.name)
    except (AttributeError, RuntimeError):
        return []
    found = []
    outputs: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    for overload_name in packet.overloads():
        op = getattr(packet, overload_name)
        schema = op._schema
        outputs = outputs or _forward_outputs(card, op)
        out_args = tuple(a.name for a in schema.arguments if a.is_out)
        args = {a.name: a.name for a in schema.arguments if _is_tensor(a) and not a.is_out}
        if overload_name == "default":
            inputs = tuple(args)
        args.update(zip(out_args, outputs, strict=False))
        if len(schema.returns) != len(outputs):
            raise LayoutError(
                f"opbridge: {op} returns {len(schema.returns)} tensors, its card's op "
                f"{card.qualified_name} names {len(outputs)} outputs ({', '.join(outputs)})"
            )
        found.append(Plan(card, op, args, outputs, out_args))
    spec = _spec(card)
    backward_name = f"{card.name}_backward"
    namespace = getattr(torch.ops, card.namespace)
    if spec is None or not spec.get("backward_schema") or not hasattr(namespace, backward_name):
        return found
    op = getattr(namespace, backward_name).default
    returns = len(op._schema.returns)
    layout = card.layout if isinstance(card.layout, Layout) else None
    if card.layout is None:  # replicated: no tensor needs a layout
        args = {a.name: a.name for a in op._schema.arguments if _is_tensor(a)}
        found.append(Plan(card, op, args, tuple(f"grad{k}" for k in range(returns)), gradient=True))
        return found
    named = set(layout.tensors) if layout is not None else set()
    derived = _from_spec(spec, outputs)
    args = {}
    for argument in op._schema.arguments:
        if not _is_tensor(argument):
            continue
        name = argument.name
        if name in named:
            args[name] = name
        elif derived is not None and name in derived[0]:
            args[name] = derived[0][name]
        elif name in inputs or name in outputs:
            args[name] = name
        elif name.startswith("grad_") and name[5:] in outputs:
            args[name] = name[5:]
        else:
            raise LayoutError(
                f"opbridge: {op}: its input {name!r} is no gradient of an output "
                f"({', '.join(outputs)}) nor a saved input or output of "
                f"{card.qualified_name}; name it in the card's Layout.tensors"
            )
    given = layout is not None and bool(layout.gradients)
    if given:
        gradients = tuple(layout.gradients)
    elif derived is not None:
        gradients = derived[1]
    else:
        gradients = inputs
    if returns != len(gradients):
        raise LayoutError(
            f"opbridge: {op} returns {returns} gradients, but the card of "
            f"{card.qualified_name} gives {len(gradients)} ({', '.join(gradients)}: "
            + ("Layout.gradients" if given else "one per forward input")
            + "); list the forward tensor each gradient is for in Layout.gradients"
        )
    found.append(Plan(card, op, args, gradients, gradient=True))
    return found


def check_layout(card: Card) -> list[str]:
    """What is wrong with the card's layout, one line per problem (a layout
    function is only checked when called); an empty list when nothing is."""
    try:
        found = plans(card)
    except LayoutError as error:
        return [str(error)]
    if not isinstance(card.layout, Layout):
        return []
    problems = []
    for plan in found:
        for tensor in sorted({*plan.args.values(), *plan.outputs}):
            if tensor not in card.layout.tensors:
                problems.append(
                    f"opbridge: {plan.name}: the layout of {card.qualified_name}'s card "
                    f"(in {card.origin or '?'}) has no entry for tensor {tensor!r}"
                )
        for texts in card.layout.tensors.values():
            for text in (texts,) if isinstance(texts, str) else texts:
                try:
                    _parse(f"{card.qualified_name}", text, None, 0)
                except LayoutError as error:
                    problems.append(str(error))
    return sorted(set(problems))


def _layout(card: Card, attrs: dict[str, Any]) -> Layout | None:
    if card.layout is None or isinstance(card.layout, Layout):
        return card.layout
    found = card.layout(**attrs)
    if not isinstance(found, Layout):
        raise LayoutError(
            f"opbridge: the layout function of {card.qualified_name}'s card returned a "
            f"{type(found).__name__}, expected a Layout"
        )
    return found


def _parse(where: str, text: str, ndim: int | None, ellipsis: int) -> tuple[str, ...] | None:
    """The dimension names of one layout text for a tensor of rank ``ndim``
    (``...`` dims are ``.0`` for the last, ``.1``, ...; when ``ndim`` is
    None, ``...`` stands for ``ellipsis`` dims); None when it has another
    rank."""
    text = text.replace(" ", "")
    head, found, tail = text.partition(ELLIPSIS)
    letters = head + tail
    if ELLIPSIS in tail or not all(c.isalpha() for c in letters):
        raise LayoutError(
            f"opbridge: {where}: layout {text!r}: expected letters and at most one '...'"
        )
    if len(set(letters)) != len(letters):
        raise LayoutError(f"opbridge: {where}: layout {text!r} names a dimension twice")
    if not found:
        return tuple(letters) if ndim is None or ndim == len(letters) else None
    count = ellipsis if ndim is None else ndim - len(letters)
    if count < 0:
        return None
    return tuple(head) + tuple(f".{k}" for k in reversed(range(count))) + tuple(tail)


def _dims(layout: Layout, op: str, tensor: str, ndim: int | None, ellipsis: int = 0):
    if tensor not in layout.tensors:
        raise LayoutError(
            f"opbridge: {op}: the card's layout has no entry for tensor {tensor!r} "
            f"(it has {', '.join(layout.tensors)})"
        )
    texts = layout.tensors[tensor]
    texts = (texts,) if isinstance(texts, str) else tuple(texts)
    where = f"{op}, tensor {tensor!r}"
    for text in texts:
        dims = _parse(where, text, ndim, ellipsis)
        if dims is not None:
            return dims
    raise LayoutError(
        f"opbridge: {op}: tensor {tensor!r} is {ndim}-D, its layout "
        f"{' or '.join(repr(t) for t in texts)} is not"
    )


def single_dim_strategies(
    plan: Plan, args: Sequence[tuple[str, Sequence[int] | None]], attrs: dict[str, Any]
) -> list[list[Any]]:
    """The acceptable placements of the op on one mesh dimension, each a list
    ``[*outputs, *inputs]`` (inputs in ``args`` order, None for an absent
    tensor): all replicated first, then one per shardable dimension.

    ``args``: ``(argument name, shape)`` of each tensor argument in the
    order the op was called (positional ones, then keyword ones); shape None
    for an absent one. ``attrs``: the op's other arguments by name."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    replicated = [Replicate() for _ in plan.outputs]
    replicated += [None if shape is None else Replicate() for _, shape in args]
    strategies = [replicated]
    layout = _layout(plan.card, attrs)
    if layout is None:
        return strategies
    inputs = []  # (layout tensor, dims, shape) of each given input; None otherwise
    sizes: dict[str, int] = {}
    for name, shape in args:
        if shape is None or name in plan.out_args:
            inputs.append(None)
            continue
        tensor = plan.args[name]
        dims = _dims(layout, plan.name, tensor, len(shape))
        inputs.append((tensor, dims, tuple(shape)))
        for dim, size in zip(dims, shape, strict=True):
            sizes[dim] = max(sizes.get(dim, 0), size)
    ellipsis = max((sum(d.startswith(".") for d in i[1]) for i in inputs if i), default=0)
    outputs = []  # (dims, shape or None) of each output
    for tensor in plan.outputs:
        saved = next((i for i in inputs if i and i[0] == tensor), None)
        if saved is not None:
            outputs.append((saved[1], saved[2]))
        else:
            outputs.append((_dims(layout, plan.name, tensor, None, ellipsis), None))
    for dim, size in sizes.items():
        if size <= 1 or dim in layout.whole:
            continue
        row = []
        for dims, shape in outputs:
            if dim in dims and (shape is None or shape[dims.index(dim)] == size):
                row.append(Shard(dims.index(dim)))
            elif plan.gradient:
                row.append(Partial())
            else:
                break
        if len(row) < len(outputs):
            continue
        outs = dict(zip(plan.out_args, row, strict=False))
        for (name, _), given in zip(args, inputs, strict=True):
            if name in outs:
                row.append(outs[name])
            elif given is None:
                row.append(None)
            else:
                _, dims, shape = given
                if dim in dims and shape[dims.index(dim)] == size:
                    row.append(Shard(dims.index(dim)))
                else:
                    row.append(Replicate())
        strategies.append(row)
    return strategies


def _call(op, args: tuple, kwargs: dict):
    """``[(name, shape or None)]`` of the tensor arguments and ``{name:
    value}`` of the others (defaults included), from an op's arguments
    (tensors, DTensor strategies or anything with a ``shape``)."""
    schema = op._schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    by_name = {a.name: a for a in schema.arguments}
    tensors, attrs = [], {}
    for argument in schema.arguments:
        if not _is_tensor(argument) and argument.has_default_value():
            attrs[argument.name] = argument.default_value
    pairs = list(zip(positional, args, strict=False))
    pairs += [(by_name[k], v) for k, v in kwargs.items()]
    for argument, value in pairs:
        if _is_tensor(argument):
            tensors.append((argument.name, None if value is None else tuple(value.shape)))
        else:
            attrs[argument.name] = value
    return tensors, attrs


def shardings(op, *args, **kwargs) -> list[tuple[list[Any], list[Any]]]:
    """The placements ``(outputs, inputs)`` the op accepts on one mesh
    dimension for these arguments (tensors, or anything with a ``shape``),
    as DTensor's propagation sees them: what the strategies registered for
    ``op`` (an op overload) enumerate. Needs no process group."""
    plan = _plan_of(op)
    tensors, attrs = _call(op, args, kwargs)
    count = len(plan.outputs)
    return [(row[:count], row[count:]) for row in single_dim_strategies(plan, tensors, attrs)]


def _plan_of(op) -> Plan:
    with _LOCK:
        table = _PLANS
        if op not in table:
            for card in cards().values():
                for plan in plans(card):
                    table.setdefault(plan.op, plan)
        if op not in table:
            raise LayoutError(f"opbridge: no card has the op {op}")
        return table[op]


def _strategy(plan: Plan, op_schema):
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    # Tensor arguments are OpStrategy objects here, with the tensor's shape.
    tensors, attrs = _call(plan.op, op_schema.args_schema, dict(op_schema.kwargs_schema))
    rows = single_dim_strategies(plan, tensors, attrs)
    return expand_to_full_mesh_op_strategy(
        op_schema.get_mesh_from_args(),
        op_schema,
        rows,
        input_index=len(plan.outputs),
        inplace_op=op_schema.is_inplace_op(),
    )


def _schema_info(op):
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    arguments = op._schema.arguments
    # Every argument from the first optional tensor or attribute on is part
    # of the cache key: whether a tensor is given and the attributes (a
    # layout may depend on them) change the strategies.
    static = next(
        (
            k
            for k, a in enumerate(arguments)
            if not a.kwarg_only and not isinstance(a.type, torch.TensorType)
        ),
        100,
    )
    keys = [a.name for a in arguments if a.kwarg_only and not _is_tensor(a)]
    return RuntimeSchemaInfo(static_argnum=static, static_kwargkey=keys or None)


def _register_card(card: Card) -> None:
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    for plan in plans(card):
        op = plan.op
        _PLANS[op] = plan
        taken = (
            op in propagator.op_strategy_funcs
            or op in propagator.op_to_rules
            or op in getattr(propagator, "op_single_dim_strategy_funcs", {})
        )
        if taken and op not in _OURS:
            continue
        propagator.register_op_strategy(op, functools.partial(_strategy, plan), _schema_info(op))
        _OURS.add(op)


def _register_all() -> None:
    global _ACTIVE
    with _LOCK:
        if _ACTIVE:
            return
        _ACTIVE = True
        for card in cards().values():
            try:
                _register_card(card)
            except Exception as error:  # a bad card must not break the import of DTensor
                warnings.warn(
                    f"opbridge: no DTensor sharding strategies for {card.qualified_name} "
                    f"(card in {card.origin or '?'}): {error}",
                    stacklevel=2,
                )


def _on_register(card: Card) -> None:
    problems = check_layout(card)
    if problems:
        raise LayoutError("; ".join(problems))
    with _LOCK:
        _PLANS.clear()
        if _ACTIVE:
            _register_card(card)


def _on_load(library: Library) -> None:
    """The strategies of the cards registered before their library was loaded."""
    with _LOCK:
        if not _ACTIVE:
            return
        _PLANS.clear()
        for card in cards().values():
            if card.namespace == library.torch_namespace:
                _register_card(card)


class _Finder(WaitingFinder):
    """Waits for the import of torch.distributed.tensor (once)."""


def install() -> None:
    """Registers the strategies now if torch.distributed.tensor is imported,
    else when it is; and those of every card registered later."""
    with _LOCK:
        if _on_register not in _ON_REGISTER:
            _ON_REGISTER.append(_on_register)
        if _on_load not in ON_LOAD:
            ON_LOAD.append(_on_load)
        if not torch.distributed.is_available():
            return
        when_imported(DTENSOR_MODULE, _register_all, _Finder)
