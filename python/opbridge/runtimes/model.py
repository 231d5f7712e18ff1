"""What a session needs to know about an ONNX model, worked out once per
model for every runtime: the domains its nodes use (in the graph, the
subgraphs of If, Loop and Scan nodes, and its own functions), the domains
whose nodes all call its own functions, the loaded operator libraries it
needs, and the checks that name what a runtime would only call an
unregistered op (an unknown domain, a domain version or op type a library
lacks)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from opbridge._library import (
    BUILTIN,
    METADATA_DOMAIN_VERSION_PREFIX,
    ONNX_DOMAIN,
    ONNX_DOMAIN_VERSION,
    VERSION,
    Library,
    libraries,
    library_for_domain,
)
from opbridge.runtimes.base import load_model

# Domains runtimes implement themselves (and the exporters' function domains).
RUNTIME_DOMAINS = frozenset(
    {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}
)
RUNTIME_DOMAIN_PREFIXES = ("com.microsoft", "com.ms.", "pkg.")
# The version ONNX Runtime writes for a custom domain it saves a model with
# (optimized_model_filepath): the top of a custom domain's range, not a
# version the model needs.
SAVED_CUSTOM_DOMAIN_VERSION = 1000

# A runtime's file of an operator library, which messages name.
LibraryFile = Callable[[Library], Path]


def _ort_file(library: Library) -> Path:
    return library.adapter_path("ort")


def is_runtime_domain(domain: str) -> bool:
    """Whether a runtime implements ``domain`` itself (no library needed)."""
    return domain in RUNTIME_DOMAINS or domain.startswith(RUNTIME_DOMAIN_PREFIXES)


def nodes(graph: Any) -> Iterator[Any]:
    """Every node of a graph, those of its subgraphs (If, Loop, Scan) included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from nodes(subgraph)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` most likely misspells: equal but for case, or
    close to it (difflib, ignoring case); None when none is close."""
    by_folded = {candidate.casefold(): candidate for candidate in candidates}
    folded = name.casefold()
    if folded in by_folded:
        return by_folded[folded]
    close = difflib.get_close_matches(folded, list(by_folded), n=1, cutoff=0.8)
    return by_folded[close[0]] if close else None


def used_domains(proto: Any) -> set[str]:
    """The domain of every node of the model wherever it is: the graph, the
    subgraphs of its If, Loop and Scan nodes, and the bodies of its local
    functions (a library node inside a function body selects its library
    like any other)."""
    graphs = [proto.graph, *proto.functions]
    return {node.domain for graph in graphs for node in nodes(graph)}


def local_function_domains(proto: Any) -> set[str]:
    """The domains whose every node (in the graph, its subgraphs and the
    model's functions) calls one of the model's own functions: a runtime
    can run each of them without a library, by the function's body (the
    ``function`` route's fallback)."""
    functions = {(function.domain, function.name) for function in proto.functions}
    graphs = [proto.graph, *proto.functions]
    by_domain: dict[str, bool] = {}
    for graph in graphs:
        for node in nodes(graph):
            local = (node.domain, node.op_type) in functions
            by_domain[node.domain] = by_domain.get(node.domain, True) and local
    return {domain for domain, local in by_domain.items() if local}


def needed_libraries(proto: Any) -> list[Library]:
    """The loaded libraries whose domain the model uses (opbridge's own
    always first); a domain no loaded library provides is left out."""
    needed = [BUILTIN]
    for domain in sorted(used_domains(proto)):
        library = library_for_domain(domain)
        if library is not None and library is not BUILTIN:
            needed.append(library)
    return needed


def unknown_domain_error(proto: Any, library_file: LibraryFile | None = None) -> str | None:
    """What to say of the first custom domain the model uses that no loaded
    library provides and that is not only calls of its own functions (whose
    bodies a runtime runs); None when there is none. The message names the
    loaded libraries (and one the domain may misspell), and ends with the
    model's domain, escaped (``ascii``), so that no character of it can
    garble the rest."""
    file_of = library_file or _ort_file
    local = local_function_domains(proto)
    for domain in sorted(used_domains(proto)):
        if is_runtime_domain(domain) or domain in local or library_for_domain(domain):
            continue
        loaded = libraries()
        names = ", ".join(f"{lib.onnx_domain} ({file_of(lib).name})" for lib in loaded)
        near = closest(domain, (lib.onnx_domain for lib in loaded))
        hint = f"did you mean '{near}'? Otherwise load" if near else "load"
        return (
            f"opbridge: the model uses ONNX domain {domain!a}, which no loaded operator "
            f"library provides (loaded: {names}); {hint} its library first with "
            f"opbridge.load_library(path). Unknown domain: {domain!a}"
        )
    return None


def libraries_for(model: Any, library_file: LibraryFile | None = None) -> list[Library]:
    """The loaded libraries a model needs (opbridge's own always comes first),
    after checking each domain's version against the model.

    A library is needed wherever a node of its domain is: in the graph, in
    the subgraphs of If, Loop and Scan nodes, and in the bodies of the
    model's own functions, on every route: a ``function``-route node (one
    with a model-local function of its domain and op type, the fallback
    body) needs its library too, so that the runtime runs the library's
    kernel rather than the body. A custom domain without a loaded library
    whose every node calls one of the model's own functions needs nothing
    (the runtime runs the bodies). A model that uses any other custom domain
    no loaded library provides is refused (:func:`unknown_domain_error`).
    ``library_file`` is the runtime's file of a library, which messages name
    (default: its ONNX Runtime library).
    """
    proto = load_model(model)
    check_domain_version(proto, library_file)
    refusal = unknown_domain_error(proto, library_file)
    if refusal is not None:
        raise RuntimeError(refusal)
    return needed_libraries(proto)


def check_op_types(model: Any, library_file: LibraryFile | None = None) -> None:
    """Raises if a node of a loaded library's domain has an op type that
    library lacks (ONNX Runtime itself would only say the op "is not a
    registered function/op"): names the library and its op types, and the one
    the node's may misspell. The node's op type comes last, escaped.

    Nodes that call the model's own functions are left alone. ``model`` is a
    path, bytes or a ``ModelProto``; ``library_file`` as for
    :func:`libraries_for`.
    """
    file_of = library_file or _ort_file
    proto = load_model(model)
    functions = {(function.domain, function.name) for function in proto.functions}
    graphs = [proto.graph, *proto.functions]
    known: dict[str, set[str]] = {}
    for graph in graphs:
        for node in nodes(graph):
            library = library_for_domain(node.domain)
            if library is None or (node.domain, node.op_type) in functions:
                continue
            if library.onnx_domain not in known:
                specs = library.specs().values()
                known[library.onnx_domain] = {s["onnx_type"] for s in specs if s.get("onnx_type")}
            types = known[library.onnx_domain]
            if node.op_type in types:
                continue
            near = closest(node.op_type, types)
            hint = f"; did you mean '{near}'?" if near else "."
            which = f"node {node.name!a}" if node.name else "a node"
            op = f"{node.domain}:{node.op_type}"
            raise RuntimeError(
                f"{library.name}: the model's {which} has an op type that the operator library "
                f"{library.name} ({file_of(library).name}, ONNX domain "
                f"'{library.onnx_domain}') does not have; its op types: "
                f"{', '.join(sorted(types))}{hint} The node's op type: {op!a}"
            )


def check_domain_version(model: Any, library_file: LibraryFile | None = None) -> None:
    """Raises if the model needs a version of a library domain the loaded
    library lacks: newer (by its opset imports and its
    ``opbridge.domain_version.<domain>`` metadata), or below 1. An opset
    import of version 1000 is ONNX Runtime's stamp on a model it saved
    (:data:`SAVED_CUSTOM_DOMAIN_VERSION`), not a version the model needs.

    ONNX Runtime itself would only say the op "is not a registered
    function/op"; this names both versions. ``model`` is a path, bytes or a
    ``ModelProto``; ``library_file`` as for :func:`libraries_for`.
    """
    file_of = library_file or _ort_file
    proto = load_model(model)
    wanted = {
        opset.domain: opset.version
        for opset in proto.opset_import
        if opset.version != SAVED_CUSTOM_DOMAIN_VERSION or not library_for_domain(opset.domain)
    }
    for prop in proto.metadata_props:
        if prop.key.startswith(METADATA_DOMAIN_VERSION_PREFIX):
            domain = prop.key[len(METADATA_DOMAIN_VERSION_PREFIX) :]
            try:
                wanted[domain] = max(wanted.get(domain, 0), int(prop.value))
            except ValueError:
                continue
    for domain, version in wanted.items():
        library = library_for_domain(domain)
        if library is None:
            continue
        if version < 1:
            raise RuntimeError(
                f"{library.name}: the model imports ONNX domain '{domain}' version "
                f"{version}, but the domain's versions start at 1 (this library, "
                f"{library.name} {library.version}, has versions 1 to "
                f"{library.domain_version}); set that opset import's version to "
                f"{library.domain_version}"
            )
        if version <= library.domain_version:
            continue
        if library is BUILTIN:
            raise RuntimeError(
                f"opbridge: the model needs ONNX domain '{ONNX_DOMAIN}' version {version}, "
                f"but this library (opbridge {VERSION}, {file_of(BUILTIN)}) supports "
                f"version {ONNX_DOMAIN_VERSION}; upgrade opbridge"
            )
        raise RuntimeError(
            f"{library.name}: the model needs ONNX domain '{domain}' version {version}, but the "
            f"loaded library ({library.name} {library.version}, {file_of(library)}) "
            f"supports version {library.domain_version}; rebuild the model or upgrade the library"
        )


@dataclass
class ModelFacts:
    """One model as a session meets it, read once: ``proto`` (its
    ``ModelProto``, None where opbridge cannot read it: an ONNX Runtime
    ``.ort`` file, a missing file, bytes that are no ONNX model; ``unreadable``
    then says why) and what the checks above derive from it, each computed
    on first use."""

    model: Any
    proto: Any
    unreadable: Exception | None = None

    @classmethod
    def of(cls, model: Any) -> ModelFacts:
        """The facts of a path, bytes or ``ModelProto``; never raises for a
        model it cannot read (the runtime says what is wrong with it)."""
        if isinstance(model, str | os.PathLike) and (
            os.fspath(model).endswith(".ort") or not os.path.isfile(model)
        ):
            return cls(model, None, FileNotFoundError(os.fspath(model)))
        try:
            return cls(model, load_model(model))
        except Exception as error:  # not an ONNX model opbridge can read
            return cls(model, None, error)

    @cached_property
    def libraries(self) -> list[Library]:
        """The loaded libraries the model needs (:func:`needed_libraries`);
        every loaded library where the model cannot be read."""
        if self.proto is None:
            return list(libraries())
        return needed_libraries(self.proto)

    def explain(
        self, library_file: LibraryFile | None = None, *, unknown_domains: bool = True
    ) -> Exception | None:
        """Why a runtime that failed on this model failed, where opbridge can
        say it better: the error of the first of the checks above that
        fails (the model unreadable, an unknown domain, an op type), None
        when they all pass. Domain versions are not among them: a session
        refuses a model that needs a newer one before the runtime sees it
        (:func:`check_domain_version`). ``unknown_domains=False`` leaves out
        the unknown-domain check, for a failure that is not about an
        unregistered node (the caller may have registered the domain's
        library with the runtime itself)."""
        if self.proto is None:
            if isinstance(self.unreadable, ValueError):
                return self.unreadable
            return None
        try:
            refusal = unknown_domain_error(self.proto, library_file) if unknown_domains else None
            if refusal is not None:
                return RuntimeError(refusal)
            check_op_types(self.proto, library_file)
        except RuntimeError as error:
            return error
        return None
