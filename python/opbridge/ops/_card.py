"""An operator's card: everything the Python side knows about one operator.

The call, the standard-route ONNX decomposition, the pure PyTorch reference,
sample inputs for tests, inputs and alternative implementations for the
benchmark. Every card comes in through :func:`register_card`: each
built-in operator's module ``opbridge/ops/<name>.py`` ends with
``CARD = register_card(Card.of_module(globals(), ...))``, and a library with
operators of its own calls it when it is imported.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from opbridge.ops._sample import Sample

BUILTIN_NAMESPACE = "opbridge"


@dataclass(frozen=True)
class Layout:
    """How an operator's tensors line up, dimension by dimension: what
    :mod:`opbridge.ops.sharding` turns into the op's DTensor sharding
    strategies (those of the op, its ``out=`` overload and its backward op).

    - ``tensors``: one einsum-like layout per tensor, by name: a letter per
      dimension and at most one ``...`` for any number of leading ones
      (``"...d"``: rms_norm's ``x``); a tuple of layouts, one per rank, for a
      tensor that takes several (``("sr", "bsr")``: rotary_embedding's cos).
      Name the op's inputs and outputs as its spec does (``opbridge.specs()``);
      the backward's tensors take the layout of the forward tensor they stand
      for, as the spec's backward says (``GradOfOutput``, ``SavedInput``,
      ``SavedOutput``, ``InputGradients``: add_rms_norm's one ``grad_sum``
      is the gradient of ``x`` and ``residual``).
    - ``whole``: the letters of dimensions an op reduces over or mixes
      (normalised, rotated): never sharded. Every other letter, and every
      ``...`` dimension, may be sharded consistently in every tensor that has
      it.
    - ``gradients``: only for an op whose backward no spec describes (a
      PyTorch operator registered without an opbridge spec): the forward
      tensor whose layout each output of the backward op has, in order;
      empty: output ``k`` is the gradient of forward input ``k``, and a
      backward input takes the layout of the forward tensor of its name
      (``grad_<output>``, a saved tensor's).
    """

    tensors: Mapping[str, str | tuple[str, ...]]
    whole: str = ""
    gradients: tuple[str, ...] = ()


# The fields of a Card that Card.of_module reads from a module's functions.
MODULE_SLOTS = ("standard", "reference", "samples", "bench_inputs", "composite", "builtin")
# The routes whose form Card.of_module reads from a module's function of the
# route's name, into Card.forms: every registered export route, which
# opbridge.export.routes (a layer above) names here (set_form_routes).
_FORM_ROUTES: set[str] = set()


@dataclass
class Card:
    """What Python knows about one operator.

    Its math stands in three places: ``reference`` (PyTorch), ``standard``
    (the standard-route ONNX form) and ``forms`` (the other routes' ONNX
    forms). ``composite`` and ``builtin`` are what the benchmark and
    :func:`opbridge.compile` set beside it: what a user would write instead.

    - ``call``: the Python call (``opbridge.rms_norm``).
    - ``standard``: the standard-route decomposition ``(b, *inputs, **attrs)``
      written against :class:`opbridge.export.builder.Builder`.
    - ``reference``: the same math in plain PyTorch, with the call's signature.
    - ``samples(dtype=torch.float32, requires_grad=False, *, large=True,
      seed=0)``: sample calls (:class:`Sample`) covering odd shapes, layouts
      and arguments; ``large=False`` leaves out the big ones.
    - ``bench_inputs(shape, dtype, requires_grad=False)``: the call's
      arguments for the benchmark's size ``shape`` = ``[rows, cols]`` (the
      op's main input holds about rows x cols elements), the same on every
      call; floating tensors require grad when asked.
      ``samples`` and ``bench_inputs`` may be left out: :func:`register_card`
      then draws them from the operator's schema (:mod:`opbridge.ops.drawn`),
      and :func:`check_card` says when they cannot be drawn.
    - ``composite`` / ``builtin``: what a user would write instead (the
      formula in small PyTorch ops; PyTorch's own operator), with the call's
      signature; the benchmark's ``torch_composite`` / ``torch_builtin``, and
      what :func:`opbridge.compile` decomposes the op into (``composite``).
    - ``forms``: the forms of the other routes, by route name, same signature
      as ``standard`` (a route registered in :mod:`opbridge.export.routes`
      reads its own here); :meth:`form` looks up any route's. ``"ort"``: ONNX
      Runtime's own operators (``b.contrib``) where one computes exactly the
      op's result, the standard form for the other cases; absent when the
      standard form is the ``ort`` route's too.
    - ``namespace``: ``torch.ops.<namespace>.<name>`` holds the operator.
    - ``bench_backward``: whether the benchmark times a forward+backward pass
      (every output gets a gradient of ones).
    - ``layout``: how the op's tensors line up (:class:`Layout`), or a
      function of the op's attributes (by name) returning one, for the
      op's DTensor sharding strategies; None: every tensor replicated (always
      correct, never sharded).
    """

    name: str
    call: Callable
    standard: Callable | None
    reference: Callable
    samples: Callable[..., Iterator[Sample]] | None = None
    bench_inputs: Callable | None = None
    composite: Callable | None = None
    builtin: Callable | None = None
    namespace: str = BUILTIN_NAMESPACE
    bench_backward: bool = True
    forms: dict[str, Callable] = field(default_factory=dict)
    layout: Layout | Callable[..., Layout] | None = None
    # Where the card is defined (a file or module), for messages; filled in
    # when the card is loaded or registered.
    origin: str = ""

    @classmethod
    def of_module(cls, module_globals: Mapping[str, Any], /, **fields: Any) -> Card:
        """The card of a module that defines its math as functions named after
        the fields (:data:`MODULE_SLOTS`: ``standard``, ``reference``,
        ``samples``, ``bench_inputs``, ``composite``, ``builtin``) and after
        the routes whose forms it has (any registered route of
        :mod:`opbridge.export.routes`: ``ort``), as every operator module of
        opbridge does::

            CARD = Card.of_module(globals(), name="rms_norm", call=rms_norm, layout=...)

        A module without a ``composite`` has its ``reference`` as the
        composite: the formula a user would write is the reference, written
        once. A field given by keyword wins over the module's function."""
        for slot in MODULE_SLOTS:
            if slot not in fields and callable(module_globals.get(slot)):
                fields[slot] = module_globals[slot]
        if "composite" not in fields:
            fields["composite"] = fields.get("reference")
        given = dict(fields.pop("forms", {}))
        made = cls(forms=dict(given), **fields)
        _MODULE_CARDS.append((made, module_globals, frozenset(given)))
        _read_module_forms(made, module_globals, frozenset(given))
        return made

    def form(self, name: str) -> Callable | None:
        """The card's form called ``name``: ``forms[name]``, else its
        ``standard`` field for ``"standard"``, else None."""
        if name in self.forms:
            return self.forms[name]
        return self.standard if name == "standard" else None

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}::{self.name}"

    @property
    def display_name(self) -> str:
        """The bare name for one of opbridge's operators, else the qualified one."""
        return self.name if self.namespace == BUILTIN_NAMESPACE else self.qualified_name


# Every card Card.of_module made, with its module's namespace and the routes
# whose forms it was given by keyword: a route registered later reads its form.
_MODULE_CARDS: list[tuple[Card, Mapping[str, Any], frozenset[str]]] = []


def _read_module_forms(card: Card, module_globals: Mapping[str, Any], given: frozenset[str]):
    """``card.forms``: the forms it was given, and its module's function of
    each registered route's name (a card field's name aside)."""
    for name in [name for name in card.forms if name not in given | _FORM_ROUTES]:
        del card.forms[name]
    for name in sorted(_FORM_ROUTES - given - set(MODULE_SLOTS)):
        if callable(module_globals.get(name)):
            card.forms[name] = module_globals[name]


def set_form_routes(names: Iterable[str]) -> None:
    """Makes ``names`` (the registered export routes) the routes whose forms
    a card reads from its module's functions (:meth:`Card.of_module`), for
    the cards made so far too."""
    _FORM_ROUTES.clear()
    _FORM_ROUTES.update(names)
    for card, module_globals, given in _MODULE_CARDS:
        _read_module_forms(card, module_globals, given)


class UnknownOperatorError(KeyError):
    """No card for the operator asked for."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# The cards register_card took: the built-in operators' from their modules
# (opbridge.ops.<op>), and every other one (other libraries', and a user's
# card that replaces a built-in one, which wins).
_BUILTIN_CARDS: dict[str, Card] = {}
_REGISTERED: dict[str, Card] = {}
# Called with every card register_card takes (opbridge.ops.sharding's).
_ON_REGISTER: list[Callable[[Card], None]] = []
# Called with every card once register_card has registered it (export's:
# PyTorch's exporters learn an adopted operator).
AFTER_REGISTER: list[Callable[[Card], None]] = []


def _module_file(module_name: str) -> str:
    return module_name.replace(".", "/") + ".py"


def builtin_file(name: str) -> str:
    """The file that holds a built-in operator's card."""
    return f"python/opbridge/ops/{name}.py"


def builtin_module(name: str) -> ModuleType:
    """The module ``opbridge.ops.<name>`` of a built-in operator."""
    try:
        return importlib.import_module(f"opbridge.ops.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"opbridge.ops.{name}":
            raise
        raise RuntimeError(
            f"opbridge: operator '{name}' is registered in C++ but has no Python module "
            f"{builtin_file(name)} (its card: call, standard-route decomposition, reference, "
            "samples, benchmark inputs)"
        ) from error


def _builtin_card(name: str) -> Card:
    """The registered card of a built-in operator; its module registers it
    when imported (the package imports every one, by the catalog)."""
    qualified = f"{BUILTIN_NAMESPACE}::{name}"
    if qualified not in _BUILTIN_CARDS:
        card = getattr(builtin_module(name), "CARD", None)
        if not isinstance(card, Card):
            raise RuntimeError(
                f"opbridge: operator '{name}': {builtin_file(name)} has no module-level "
                "CARD = register_card(Card.of_module(globals(), ...))"
                + ("" if card is None else f" (CARD is a {type(card).__name__})")
            )
        if card.qualified_name != qualified:
            raise RuntimeError(
                f"opbridge: operator '{name}': the CARD in {builtin_file(name)} is for "
                f"{card.qualified_name}"
            )
        if qualified not in _BUILTIN_CARDS:
            raise RuntimeError(
                f"opbridge: operator '{name}': the CARD in {builtin_file(name)} is not "
                "registered (CARD = register_card(Card.of_module(globals(), ...)))"
            )
    return _BUILTIN_CARDS[qualified]


def _builtin_names() -> list[str]:
    from opbridge._library import specs

    return list(specs())


def _origin(caller: Mapping[str, Any], card: Card) -> str:
    """Where a card registered from the module of globals ``caller`` is
    defined: a module of opbridge by its file in the repository, another by
    its file."""
    module = caller.get("__name__", "")
    if module.partition(".")[0] == "opbridge":
        return f"python/{_module_file(module)}"
    return caller.get("__file__") or _guess_origin(card)


def _guess_origin(card: Card) -> str:
    """The module of the card's own functions (the call may be torch's)."""
    for attr in ("reference", "samples", "bench_inputs", "standard", "call"):
        module = getattr(getattr(card, attr, None), "__module__", None)
        if module:
            return _module_file(module)
    return "<unknown>"


def register_card(card: Card) -> Card:
    """Registers the card of an operator, built-in or of another library
    (or replaces an earlier card of the same qualified name). Returns ``card``."""
    if not isinstance(card, Card):
        raise TypeError(f"opbridge.ops.register_card: expected a Card, got {type(card).__name__}")
    caller = sys._getframe(1).f_globals
    if not card.origin:
        card.origin = _origin(caller, card)
    if card.composite is None:  # the formula a user would write: the reference
        card.composite = card.reference
    if card.samples is None or card.bench_inputs is None:
        from opbridge.ops.drawn import drawn

        samples, bench_inputs = drawn(card)
        card.samples = card.samples or samples
        card.bench_inputs = card.bench_inputs or bench_inputs
    for hook in _ON_REGISTER:  # may refuse the card (a layout that does not fit its op)
        hook(card)
    own = caller.get("__name__", "").startswith("opbridge.ops.")
    builtin = own and card.namespace == BUILTIN_NAMESPACE
    (_BUILTIN_CARDS if builtin else _REGISTERED)[card.qualified_name] = card
    for hook in AFTER_REGISTER:
        hook(card)
    return card


def cards() -> dict[str, Card]:
    """Every card, keyed by qualified name: one per built-in operator (in
    ``opbridge.specs()`` order), then the other registered ones."""
    found = {f"{BUILTIN_NAMESPACE}::{name}": _builtin_card(name) for name in _builtin_names()}
    found.update(_REGISTERED)  # the built-in ones keep their place
    return found


def card(name: str) -> Card:
    """The card of ``name``: a qualified name (``"myops::my_op"``) or the bare
    name of a built-in operator (``"rms_norm"``)."""
    qualified = name if "::" in name else f"{BUILTIN_NAMESPACE}::{name}"
    if qualified in _REGISTERED:
        return _REGISTERED[qualified]
    builtins = _builtin_names()
    namespace, _, bare = qualified.partition("::")
    if namespace == BUILTIN_NAMESPACE and bare in builtins:
        return _builtin_card(bare)
    known = list(dict.fromkeys([*builtins, *sorted(c.display_name for c in _REGISTERED.values())]))
    raise UnknownOperatorError(
        f"opbridge: no card for operator {name!r}; known: {', '.join(known)} "
        "(an operator of another library registers its card with "
        "opbridge.ops.register_card when that library is imported)"
    )


_REQUIRED = ("call", "standard", "reference", "samples", "bench_inputs")


def _binds(fn: Callable, *args, **kwargs) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): give it the benefit
        return True
    return True


def check_card(card: Card) -> list[str]:
    """What ``card`` lacks: one line per problem, naming the operator and
    where its card is defined; an empty list when it is complete."""
    where = card.origin or (
        builtin_file(card.name) if card.namespace == BUILTIN_NAMESPACE else _guess_origin(card)
    )
    name = card.qualified_name
    if not card.name or not isinstance(card.name, str):
        return [f"the card in {where} has no name"]
    problems = [
        f"{name}: the card in {where} has no {attr}"
        for attr in _REQUIRED
        if not callable(getattr(card, attr, None))
    ]
    problems += [
        f"{name}: the card in {where} has a {attr} that is not callable"
        for attr in ("composite", "builtin")
        if getattr(card, attr, None) is not None and not callable(getattr(card, attr))
    ]
    if callable(card.samples) and not _binds(
        card.samples, torch.float32, False, large=False, seed=0
    ):
        problems.append(
            f"{name}: the card in {where} has samples that do not take "
            "(dtype, requires_grad, *, large, seed)"
        )
    if callable(card.bench_inputs) and not _binds(card.bench_inputs, [1, 8], torch.float32, False):
        problems.append(
            f"{name}: the card in {where} has bench_inputs that do not take "
            "(shape, dtype, requires_grad)"
        )
    try:
        registered = hasattr(getattr(torch.ops, card.namespace), card.name)
    except Exception:
        registered = False
    if not registered:
        problems.append(
            f"{name}: the card in {where} is for torch.ops.{card.namespace}.{card.name}, "
            "which is no operator (is its library loaded?)"
        )
    elif getattr(card.samples, "drawn", False):
        from opbridge.ops.drawn import SampleDrawError

        try:
            next(iter(card.samples(torch.float32, False, large=False, seed=0)))
        except SampleDrawError as error:
            problems.append(f"{error} (the card in {where})")
    return problems
