"""ONNX Runtime's own operators that the ``ort`` route emits.

A stock ONNX Runtime runs them without any custom-op library: the contrib
operators of domain ``com.microsoft``, and ``SimplifiedLayerNormalization``,
which ONNX Runtime registers in the ai.onnx domain although ONNX does not
define it (so ``onnx.checker`` rejects a model that has it unless
:func:`check_model` is used). Their signatures are ONNX Runtime's
(``docs/ContribOperators.md`` of its sources); only what the forms use is
described here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

MICROSOFT = "com.microsoft"
_FLOATS = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")


@dataclass(frozen=True)
class Signature:
    domain: str
    since_version: int
    # (name, type variable, optional)
    inputs: tuple[tuple[str, str, bool], ...]
    outputs: tuple[tuple[str, str, bool], ...]
    # name -> "int" | "float"
    attrs: tuple[tuple[str, str], ...]
    types: tuple[tuple[str, tuple[str, ...]], ...] = (("T", _FLOATS),)


# The outputs and types of the Skip*Normalization operators: the norm, its
# statistics and the sum of the input and the skip (all but the norm optional).
_SKIP_NORM_OUTPUTS = (
    ("output", "T", False),
    ("mean", "U", True),
    ("inv_std_var", "U", True),
    ("input_skip_bias_sum", "T", True),
)
_SKIP_NORM_TYPES = (("T", _FLOATS), ("U", ("tensor(float)",)))

SCHEMAS: dict[str, Signature] = {
    "SimplifiedLayerNormalization": Signature(
        domain="",
        since_version=1,
        inputs=(("X", "T", False), ("scale", "T", False)),
        outputs=(("Y", "T", False), ("inv_std_var", "U", True)),
        attrs=(("axis", "int"), ("epsilon", "float"), ("stash_type", "int")),
        types=(("T", _FLOATS), ("U", ("tensor(float)", "tensor(double)"))),
    ),
    "SkipSimplifiedLayerNormalization": Signature(
        domain=MICROSOFT,
        since_version=1,
        inputs=(("input", "T", False), ("skip", "T", False), ("gamma", "T", False)),
        outputs=_SKIP_NORM_OUTPUTS,
        attrs=(("epsilon", "float"),),
        types=_SKIP_NORM_TYPES,
    ),
    "SkipLayerNormalization": Signature(
        domain=MICROSOFT,
        since_version=1,
        # beta is added after the norm, bias before it.
        inputs=(
            ("input", "T", False),
            ("skip", "T", False),
            ("gamma", "T", False),
            ("beta", "T", True),
            ("bias", "T", True),
        ),
        outputs=_SKIP_NORM_OUTPUTS,
        attrs=(("epsilon", "float"),),
        types=_SKIP_NORM_TYPES,
    ),
    "BiasGelu": Signature(
        domain=MICROSOFT,
        since_version=1,
        inputs=(("A", "T", False), ("B", "T", False)),
        outputs=(("C", "T", False),),
        attrs=(),
    ),
    "FastGelu": Signature(
        domain=MICROSOFT,
        since_version=1,
        inputs=(("X", "T", False), ("bias", "T", True)),
        outputs=(("Y", "T", False),),
        attrs=(),
    ),
    "RotaryEmbedding": Signature(
        domain=MICROSOFT,
        since_version=1,
        inputs=(
            ("input", "T", False),
            ("position_ids", "M", False),
            ("cos_cache", "T", False),
            ("sin_cache", "T", False),
        ),
        outputs=(("output", "T", False),),
        attrs=(
            ("interleaved", "int"),
            ("num_heads", "int"),
            ("rotary_embedding_dim", "int"),
            ("scale", "float"),
        ),
        types=(("T", _FLOATS), ("M", ("tensor(int64)",))),
    ),
}


@cache
def onnx_schema(op_type: str):
    """The ``onnx.defs.OpSchema`` of an ONNX Runtime operator of :data:`SCHEMAS`."""
    from onnx import defs

    if op_type not in SCHEMAS:
        raise KeyError(
            f"opbridge: {op_type!r} is not an ONNX Runtime operator the ort route knows; "
            f"known: {', '.join(sorted(SCHEMAS))}"
        )
    sig = SCHEMAS[op_type]
    param = defs.OpSchema.FormalParameter
    option = defs.OpSchema.FormalParameterOption

    def params(entries):
        return [
            param(name, var, param_option=option.Optional if optional else option.Single)
            for name, var, optional in entries
        ]

    kinds = {"int": defs.OpSchema.AttrType.INT, "float": defs.OpSchema.AttrType.FLOAT}
    return defs.OpSchema(
        op_type,
        sig.domain,
        sig.since_version,
        f"ONNX Runtime's {op_type}",
        inputs=params(sig.inputs),
        outputs=params(sig.outputs),
        type_constraints=[(var, list(types), "") for var, types in sig.types],
        attributes=[
            defs.OpSchema.Attribute(name, kinds[kind], "", required=False)
            for name, kind in sig.attrs
        ],
    )


def drop_unused_outputs(model) -> None:
    """Clears the names of ONNX Runtime operators' trailing outputs that no
    node reads and the graph does not return (the exporters create every
    output of a schema; ONNX Runtime computes each named one)."""
    graph = model.graph
    read = {name for node in graph.node for name in node.input}
    read |= {output.name for output in graph.output}
    dropped = set()
    for node in graph.node:
        if node.op_type not in SCHEMAS or node.domain != SCHEMAS[node.op_type].domain:
            continue
        outputs = list(node.output)
        for i in range(1, len(outputs)):
            if outputs[i] not in read:
                dropped.add(outputs[i])
                outputs[i] = ""
        while outputs and not outputs[-1]:
            outputs.pop()
        del node.output[:]
        node.output.extend(outputs)
    kept = [info for info in graph.value_info if info.name not in dropped]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def check_model(model, full_check: bool = False) -> None:
    """``onnx.checker.check_model`` for a model that may hold ONNX Runtime's
    ai.onnx-domain ``SimplifiedLayerNormalization``: its schema is known to
    the checker while it runs (and only then)."""
    import onnx

    extra = [
        onnx_schema(op_type)
        for op_type, sig in SCHEMAS.items()
        if sig.domain == ""
        and any(n.op_type == op_type and n.domain in ("", "ai.onnx") for n in model.graph.node)
    ]
    for schema in extra:
        onnx.defs.register_schema(schema)
    try:
        onnx.checker.check_model(model, full_check=full_check)
    finally:
        for schema in extra:
            onnx.defs.deregister_schema(schema.name, schema.since_version, schema.domain)
