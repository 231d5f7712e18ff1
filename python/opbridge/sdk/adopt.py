"""``opbridge new-op DIR --from-op NS::NAME``: the SDK project of an operator
you already have (a ``TORCH_LIBRARY`` operator of a ``cpp_extension``, a
``torch.library.custom_op``), written from the schema PyTorch registered for
it (``torch.ops.<ns>.<name>.default._schema``), so nothing is typed twice:

- ``spec.h``: the inputs (``Tensor`` / ``Tensor?``), the attributes (scalar
  arguments, with their defaults) and the outputs of the schema;
- ``spec.cpp``: a shape rule for the common case (floating inputs of one
  dtype, each output of the first input's dtype and shape), to review;
- ``kernel.cpp``: the forward kernel's frame (dtype dispatch, each tensor
  read through the SDK's checked accessors, each attribute by name) around
  one marked place for the loop of your kernel. Until you write it there,
  the kernel returns an error that says so: nothing computes a wrong result;
- the card: the call with the schema's signature, and the ``standard`` and
  ``reference`` functions of the card registered for the operator (copied
  from their module), when it has one; samples are drawn from the schema
  (:mod:`opbridge.ops.drawn`).

The project builds like one from ``opbridge new-op`` (``pip install
--no-build-isolation -e DIR``), or for a quick try with
:func:`opbridge.sdk.build.load` on its ``csrc`` sources.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from opbridge.ops import UnknownOperatorError, card
from opbridge.ops.adopted import schema_spec
from opbridge.sdk.scaffold import camel, render, write_files

# Where kernel.cpp's loop goes: the lines between the markers are replaced.
KERNEL_BEGIN = "  // --- the loop of your kernel: from here ---"
KERNEL_END = "  // --- to here ---"

_ATTR = {"float": "Float", "int": "Int", "bool": "Bool", "str": "String", "float[]": "Floats"}
_CPP_VALUE = {"float": "double", "int": "int64_t", "bool": "bool", "str": "std::string"}


def _cpp_default(attr: dict) -> str:
    value = attr["default"]
    if attr["type"] == "bool":
        return "true" if value else "false"
    if attr["type"] == "str":
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if attr["type"] == "float":
        return repr(float(value))
    return str(int(value))


def _attr_spec(attr: dict) -> str:
    kind = _ATTR[attr["type"]]
    if attr["default"] is None or attr["type"] == "float[]":
        return f'opbridge::Attr::{kind}("{attr["name"]}")'
    return f'opbridge::Attr::{kind}("{attr["name"]}", {_cpp_default(attr)})'


def _spec_h(spec: dict, fields: dict) -> str:
    inputs = ", ".join(
        f'opbridge::{"OptionalInput" if p["optional"] else "Input"}("{p["name"]}")'
        for p in spec["inputs"]
    )
    attrs = ", ".join(_attr_spec(a) for a in spec["attrs"])
    outputs = ", ".join(f'"{name}"' for name in spec["outputs"])
    c, ns = fields["camel"], fields["namespace"]
    return f"""// {spec["torch_schema"]}
// Written by `opbridge new-op --from-op {fields["source"]}` from the operator's
// registered schema. The spec is the operator's single contract: PyTorch
// schema, ONNX node and every runtime's kernel are generated from it.
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace {ns} {{

opbridge::Status Infer{c}(const std::vector<opbridge::TensorInfo>& inputs,
                       std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status Launch{c}(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec k{c}Spec =
    opbridge::OpSpec::Builder("{spec["name"]}", "{spec["onnx_type"]}")
        .Doc("{fields["source"]}, moved onto the opbridge SDK.")
        .Inputs({{{inputs}}})
        .Attrs({{{attrs}}})
        .Outputs({{{outputs}}})
        .Infer(Infer{c})
        // No backward yet: add .Backward(...) for gradients
        // (docs/guides/write-your-own-operator.md).
        .Forward(Launch{c});

}}  // namespace {ns}
"""


def _spec_cpp(spec: dict, fields: dict) -> str:
    c, ns, name = fields["camel"], fields["namespace"], spec["name"]
    count = len(spec["outputs"])
    return f"""#include "{name}/spec.h"

#include "opbridge/checks.h"

namespace {ns} {{

using opbridge::Status;

// The common case, to review against your kernel: every input float32 or
// float64, present inputs of the first's dtype; each output of the first
// input's dtype and shape.
Status Infer{c}(const std::vector<opbridge::TensorInfo>& inputs,
                std::vector<opbridge::TensorInfo>* outputs) {{
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingInputs(k{c}Spec, inputs));
  *outputs = std::vector<opbridge::TensorInfo>({count}, inputs[0]);
  return Status::Ok();
}}

}}  // namespace {ns}

OPBRIDGE_REGISTER_SPEC({ns}::k{c}Spec)
"""


def _kernel_cpp(spec: dict, fields: dict) -> str:
    c, ns, name = fields["camel"], fields["namespace"], spec["name"]
    reads = []
    for k, p in enumerate(spec["inputs"]):
        n = f"n_{p['name']}"
        reads.append(
            f"  // {p['name']}: {'null when absent, else ' if p['optional'] else ''}"
            f"{n} values\n"
            f"  const int64_t {n} = opbridge::NumElements(args.input_infos[{k}].shape);\n"
            f"  const T* {p['name']} = nullptr;\n"
            f"  OPBRIDGE_RETURN_IF_ERROR(opbridge::InputAs(k{c}Spec, args, {k}, {n}, "
            f"&{p['name']}));"
        )
    for k, output in enumerate(spec["outputs"]):
        n = f"n_{output}"
        reads.append(
            f"  const int64_t {n} = opbridge::NumElements(args.output_infos[{k}].shape);\n"
            f"  T* {output} = nullptr;\n"
            f"  OPBRIDGE_RETURN_IF_ERROR(opbridge::OutputAs(k{c}Spec, args, {k}, {n}, "
            f"&{output}));"
        )
    for k, attr in enumerate(spec["attrs"]):
        if attr["type"] == "str":
            reads.append(f"  const std::string& {attr['name']} = args.attrs[{k}].text;")
        elif attr["type"] == "float[]":
            reads.append(f"  const std::vector<double>& {attr['name']} = args.attrs[{k}].numbers;")
        else:
            value = _CPP_VALUE[attr["type"]]
            cast = f"static_cast<{value}>(args.attrs[{k}].number)"
            if attr["type"] == "bool":
                cast = f"args.attrs[{k}].number != 0.0"
            reads.append(f"  const {value} {attr['name']} = {cast};")
    names = (
        [p["name"] for p in spec["inputs"]]
        + [f"n_{p['name']}" for p in spec["inputs"]]
        + list(spec["outputs"])
        + [f"n_{o}" for o in spec["outputs"]]
        + [a["name"] for a in spec["attrs"]]
    )
    unused = " ".join(f"(void){n};" for n in names)
    first = spec["inputs"][0]["name"]
    return f"""// {fields["source"]}'s forward kernel on the opbridge SDK: framework-free
// C++ over plain pointers (PyTorch, ONNX Runtime and every other runtime call
// it through the SDK's adapters). Contiguous tensors; float32 and float64.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "opbridge/checks.h"
#include "{name}/spec.h"

namespace {ns} {{

using opbridge::KernelArgs;
using opbridge::Status;

namespace {{

template <typename T>
Status Forward(const KernelArgs& args) {{
{chr(10).join(reads)}
  {unused}  // the loop may leave some unread
{KERNEL_BEGIN}
  return Status::Error("{ns}::{name}: its kernel is not written yet (csrc/{name}/kernel.cpp)");
{KERNEL_END}
}}

}}  // namespace

Status Launch{c}(const KernelArgs& args) {{
  const std::string& dtype = args.input_infos[0].dtype;
  if (dtype == "float32") return Forward<float>(args);
  if (dtype == "float64") return Forward<double>(args);
  return opbridge::CheckFloatingDtype(k{c}Spec, "{first}", dtype);
}}

}}  // namespace {ns}
"""


def _python_default(attr: dict) -> str:
    return repr(attr["default"])


def _function_source(function, name: str) -> str | None:
    """The source of a module-level ``def`` named ``name`` in the generated
    card (a lambda, or a function whose source is not found: None)."""
    if function is None or getattr(function, "__name__", "<lambda>") == "<lambda>":
        return None
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return None
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("def ")), None)
    if start is None:
        return None
    lines[start] = lines[start].replace(f"def {function.__name__}(", f"def {name}(", 1)
    return "\n".join(lines[start:]) + "\n"


def _card_py(spec: dict, fields: dict, found) -> str:
    name, ns = spec["name"], fields["namespace"]
    params = [p["name"] + ("=None" if p["optional"] else "") for p in spec["inputs"]]
    params += [
        a["name"] + ("" if a["default"] is None else f"={_python_default(a)}")
        for a in spec["attrs"]
    ]
    # A required argument after one with a default keeps its place by keyword.
    ordered, seen_default = [], False
    for param in params:
        if "=" in param:
            seen_default = True
        elif seen_default:
            param = f"{param}=None"
        ordered.append(param)
    signature = ", ".join(ordered)
    arguments = ", ".join([p["name"] for p in spec["inputs"]] + [a["name"] for a in spec["attrs"]])
    sources = {}
    for slot in ("standard", "reference"):
        sources[slot] = _function_source(getattr(found, slot, None), slot)
    missing = [slot for slot, source in sources.items() if source is None]
    blocks = []
    for slot, what in (
        ("standard", "the ONNX form by the standard route, on the builder"),
        ("reference", "the same math in plain PyTorch"),
    ):
        if sources[slot] is not None:
            blocks.append(sources[slot])
        else:
            message = f"{ns}::{name}: the card has no {slot} yet"
            blocks.append(
                f"def {slot}(*args, **kwargs):\n"
                f'    """{what[0].upper()}{what[1:]}: write it here."""\n'
                f"    raise NotImplementedError({message!r})\n"
            )
    copied = (
        f"# standard and reference: copied from the card of {fields['source']}"
        f" ({getattr(found, 'origin', '')})."
        if not missing
        else f"# Write {' and '.join(missing)} below (the card of {fields['source']} had none "
        "to copy)."
    )
    return f'''"""The {name} operator's card, written by `opbridge new-op --from-op
{fields["source"]}` from its registered schema: {spec["torch_schema"]}"""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card


def {name}({signature}):
    """torch.ops.{ns}.{name}: {fields["source"]} on the opbridge SDK."""
    return torch.ops.{ns}.{name}.default({arguments})


{copied}
{(chr(10) * 2).join(blocks)}

# Samples and benchmark inputs are drawn from the schema (opbridge.ops.drawn);
# give the card samples and bench_inputs of its own where they cannot be.
CARD = opbridge.ops.register_card(
    Card(name="{name}", namespace="{ns}", call={name}, standard=standard, reference=reference)
)
'''


def _test_py(spec: dict, fields: dict) -> str:
    text = render("test_op.py.in", fields)
    text = text.replace(
        "# Values of @name@'s attributes that its kernel must refuse (its CheckCap:\n"
        "# cap finite and positive); add an entry for every attribute you add.\n"
        'INVALID_ATTRS = {"cap": [0.0, -1.0, float("inf"), float("nan")]}'.replace(
            "@name@", spec["name"]
        ),
        "# Values of the attributes that its kernel must refuse, by attribute.\nINVALID_ATTRS = {}",
    )
    return text.replace(
        "def test_gradcheck():\n    checks.check_gradcheck(CARD)\n\n\n",
        "# test_gradcheck: once spec.h gives the operator a backward.\n\n\n",
    )


def files(source: str, namespace: str | None = None, domain: str | None = None) -> dict:
    """The project's files (relative path -> text) for the operator
    ``source`` (``"ns::name"``, registered in this process), in torch
    namespace ``namespace`` (default: the operator's own) and ONNX domain
    ``domain`` (default ``com.example.<namespace>``)."""
    from opbridge._library import VERSION

    op_namespace, _, name = source.partition("::")
    if not name:
        raise ValueError(f"opbridge new-op: --from-op takes NAMESPACE::NAME, got {source!r}")
    try:
        spec = schema_spec(op_namespace, name)
    except (AttributeError, RuntimeError) as error:
        raise ValueError(
            f"opbridge new-op: no operator torch.ops.{op_namespace}.{name} in this process "
            "(--import the module that loads it)"
        ) from error
    namespace = namespace or op_namespace
    domain = domain or f"com.example.{namespace}"
    try:
        found = card(source)
    except UnknownOperatorError:
        found = None
    fields = {
        "name": name,
        "camel": camel(name),
        "namespace": namespace,
        "domain": domain,
        "domain_repr": repr(domain),
        "sdk_version": ".".join(VERSION.split(".")[:2]),
        "opbridge_version": VERSION,
        "source": source,
    }
    spec = {**spec, "torch_schema": spec["torch_schema"].replace(f"{op_namespace}::", "", 1)}
    return {
        "pyproject.toml": render("pyproject.toml.in", fields),
        "CMakeLists.txt": render("CMakeLists.txt.in", fields),
        f"csrc/{name}/spec.h": _spec_h(spec, fields),
        f"csrc/{name}/spec.cpp": _spec_cpp(spec, fields),
        f"csrc/{name}/kernel.cpp": _kernel_cpp(spec, fields),
        f"python/{namespace}/__init__.py": render("__init__.py.in", fields),
        f"python/{namespace}/{name}.py": _card_py(spec, fields, found),
        f"tests/test_{name}.py": _test_py(spec, fields),
        ".gitignore": "/build/\n__pycache__/\n*.egg-info/\n",
    }


def write_from_op(
    directory, source: str, namespace: str | None = None, domain: str | None = None
) -> list[Path]:
    """Writes :func:`files` into ``directory`` (new, or empty); the paths written."""
    return write_files(directory, files(source, namespace, domain))
