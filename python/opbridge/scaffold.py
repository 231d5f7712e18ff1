"""``opbridge new-op DIR --name NAME``: a complete out-of-tree project for one
operator, built on the installed opbridge SDK.

The operator is ``y = cap * tanh(x / cap)`` (soft capping, with a real
backward), named as the user asks: spec and kernel in C++, a Python card
(call, reference, standard decomposition, samples, benchmark inputs), a
``pyproject.toml`` that builds with ``pip install --no-build-isolation -e
DIR``, tests that run the checks every opbridge operator gets, and an
``example.py`` for ``opbridge verify DIR/example.py:make``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

HELP = "write a new out-of-tree operator project (spec, kernel, card, tests) on the opbridge SDK"

_SPEC_H = """\
// {name}(Tensor x, float cap=30.0) -> Tensor: y = cap * tanh(x / cap).
// The spec is the operator's single contract: PyTorch schema, ONNX node and
// ONNX Runtime kernel are all generated from it.
#pragma once

#include <vector>

#include "opbridge/spec.h"

namespace {namespace} {{

opbridge::Status Infer{camel}(const std::vector<opbridge::TensorInfo>& inputs,
                       std::vector<opbridge::TensorInfo>* outputs);
opbridge::Status Launch{camel}(const opbridge::KernelArgs& args);
opbridge::Status Launch{camel}Backward(const opbridge::KernelArgs& args);

inline const opbridge::OpSpec k{camel}Spec{{
    "{name}",
    "{camel}",
    "cap * tanh(x / cap), elementwise: bounds x smoothly to (-cap, cap).",
    {{{{"x", false}}}},
    {{{{"cap", opbridge::AttrType::kFloat, true, 30.0}}}},
    {{"y"}},
    Infer{camel},
    Launch{camel},
    nullptr,
    // Backward: grad_x = grad_y * (1 - tanh(x / cap)^2), from the saved x.
    {{{{{{"grad_y", opbridge::TensorSource::kGradOutput, 0, 1}},
      {{"x", opbridge::TensorSource::kInput, 0}}}},
     {{{{"grad_x", 1}}}},
     {{0}},
     Launch{camel}Backward}},
}};

}}  // namespace {namespace}
"""

_SPEC_CPP = """\
#include "{name}/spec.h"

#include <cmath>
#include <string>

#include "opbridge/checks.h"

namespace {namespace} {{

using opbridge::Status;

// x is float32 or float64 (any shape); y has x's shape and dtype; cap must be
// finite and positive.
Status Infer{camel}(const std::vector<opbridge::TensorInfo>& inputs,
                    std::vector<opbridge::TensorInfo>* outputs) {{
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckInputCount(k{camel}Spec, inputs));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingDtype(k{camel}Spec, "x", inputs[0].dtype));
  *outputs = {{inputs[0]}};
  return Status::Ok();
}}

}}  // namespace {namespace}

OPBRIDGE_REGISTER_SPEC({namespace}::k{camel}Spec)
"""

_KERNEL_CPP = """\
// The framework-free kernels: raw pointers, sizes and the host's parallel-for
// (at::parallel_for in PyTorch, the session's pool in ONNX Runtime).
#include <cmath>
#include <string>

#include "opbridge/checks.h"
#include "{name}/spec.h"

namespace {namespace} {{

using opbridge::KernelArgs;
using opbridge::Status;

namespace {{

Status CheckCap(double cap) {{
  if (!(cap > 0.0) || !std::isfinite(cap)) {{
    return opbridge::ArgError(k{camel}Spec, "cap",
                              "must be finite and positive, got " + std::to_string(cap));
  }}
  return Status::Ok();
}}

}}  // namespace

Status Launch{camel}(const KernelArgs& args) {{
  const double cap = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckCap(cap));
  const int64_t n = opbridge::NumElements(args.input_infos[0].shape);
  return opbridge::DispatchFloating(k{camel}Spec, "x", args.input_infos[0].dtype, [&](auto tag) {{
    using T = decltype(tag);
    const T* x = static_cast<const T*>(args.inputs[0]);
    T* y = static_cast<T*>(args.outputs[0]);
    const T c = static_cast<T>(cap);
    args.parallel_for(n, 16384, [&](int64_t begin, int64_t end) {{
      for (int64_t i = begin; i < end; ++i) y[i] = c * std::tanh(x[i] / c);
    }});
  }});
}}

// Backward inputs: grad_y, x; output: grad_x.
Status Launch{camel}Backward(const KernelArgs& args) {{
  const double cap = args.attrs[0].number;
  OPBRIDGE_RETURN_IF_ERROR(CheckCap(cap));
  const int64_t n = opbridge::NumElements(args.input_infos[1].shape);
  return opbridge::DispatchFloating(k{camel}Spec, "x", args.input_infos[1].dtype, [&](auto tag) {{
    using T = decltype(tag);
    const T* grad_y = static_cast<const T*>(args.inputs[0]);
    const T* x = static_cast<const T*>(args.inputs[1]);
    T* grad_x = static_cast<T*>(args.outputs[0]);
    const T c = static_cast<T>(cap);
    args.parallel_for(n, 16384, [&](int64_t begin, int64_t end) {{
      for (int64_t i = begin; i < end; ++i) {{
        const T t = std::tanh(x[i] / c);
        grad_x[i] = grad_y[i] * (T(1) - t * t);
      }}
    }});
  }});
}}

}}  // namespace {namespace}
"""

_CMAKE = """\
cmake_minimum_required(VERSION 3.25)
project({namespace} VERSION 0.1.0 LANGUAGES CXX)

# The opbridge SDK, from the Python environment opbridge is installed in.
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(
  COMMAND "${{Python3_EXECUTABLE}}" -c "import opbridge; print(opbridge.cmake_prefix_path())"
  OUTPUT_VARIABLE OPBRIDGE_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
list(APPEND CMAKE_PREFIX_PATH "${{OPBRIDGE_PREFIX}}")
find_package(opbridge {sdk_version} CONFIG REQUIRED)

file(GLOB OP_SOURCES CONFIGURE_DEPENDS "${{CMAKE_CURRENT_SOURCE_DIR}}/csrc/*/*.cpp")
# {namespace}_torch (PyTorch: torch.ops.{namespace}.*) and lib{namespace}_ort.so
# (ONNX Runtime, domain {domain}), installed into the Python package.
opbridge_add_operator_library(
  {namespace}
  SOURCES ${{OP_SOURCES}}
  TORCH_NAMESPACE {namespace}
  ONNX_DOMAIN {domain}
  DOMAIN_VERSION 1
  INCLUDE_DIRECTORIES "${{CMAKE_CURRENT_SOURCE_DIR}}/csrc"
  INSTALL_DESTINATION {namespace})
"""

_PYPROJECT = """\
[build-system]
# Built in the environment opbridge and torch are installed in:
#   pip install --no-build-isolation -e .
requires = ["scikit-build-core==1.1.2"]
build-backend = "scikit_build_core.build"

[project]
name = "{namespace}"
version = "0.1.0"
description = "The {name} operator for PyTorch and ONNX Runtime, built on opbridge."
requires-python = ">=3.11"

[tool.scikit-build]
minimum-version = "build-system.requires"
cmake.version = ">=3.25"
build-dir = "build/{{wheel_tag}}"
wheel.packages = ["python/{namespace}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

_INIT = """\
\"\"\"{namespace}: the {name} operator, built with the opbridge SDK.

Importing this package loads the library: torch.ops.{namespace}.{name} in
PyTorch, ONNX domain {domain!r} for ONNX Runtime (opbridge.ort.InferenceSession
registers it for models that use it), and the operator's card.
\"\"\"

import opbridge

from {namespace} import {namespace}_torch as _native

LIBRARY = opbridge.load_library(_native)

from {namespace}.{name} import CARD, {name}  # noqa: E402

__all__ = ["CARD", "LIBRARY", "{name}"]
"""

_CARD = """\
\"\"\"The {name} operator's card: everything Python knows about it.\"\"\"

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample


def {name}(x: torch.Tensor, cap: float = 30.0) -> torch.Tensor:
    \"\"\"cap * tanh(x / cap), elementwise (x float32 or float64).\"\"\"
    return torch.ops.{namespace}.{name}.default(x, cap)


def reference(x, cap=30.0):
    \"\"\"The same math in plain PyTorch.\"\"\"
    return cap * torch.tanh(x / cap)


def standard(b, x, *, cap):
    \"\"\"Standard-route decomposition (one function for both exporters):
    Div -> Tanh -> Mul.\"\"\"
    c = b.constant(cap, like=x)
    return b.op("Mul", b.op("Tanh", b.op("Div", x, c)), c)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def x(*shape):
        t = 40.0 * torch.randn(shape, dtype=torch.float64, generator=g)
        return t.to(dtype).requires_grad_(requires_grad)

    yield Sample((x(4, 16), 30.0), label="typical")
    yield Sample((x(1), 5.0), label="one element")
    yield Sample((x(2, 3, 5),), label="3-d, default cap")
    yield Sample((x(3, 7), 0.5), label="small cap")
    noncontig = x(9, 6).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), 10.0), label="non-contiguous")
    if large:
        yield Sample((x(2, 70000), 30.0), label="very long row")


def bench_inputs(shape, dtype, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    x = (40.0 * torch.randn(shape, generator=g)).to(dtype).requires_grad_(requires_grad)
    return (x, 30.0)


CARD = opbridge.ops.register_card(
    Card(
        name="{name}",
        namespace="{namespace}",
        call={name},
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=reference,
    )
)
"""

_TESTS = """\
\"\"\"The checks every opbridge operator gets (opbridge.testing), for {name}.\"\"\"

import pytest

import opbridge.testing as checks
from {namespace} import CARD


def test_card_is_complete():
    assert opbridge_card_problems() == []


def opbridge_card_problems():
    from opbridge.ops import check_card

    return check_card(CARD)


def test_matches_reference():
    checks.check_reference(CARD)


def test_opcheck():
    checks.check_opcheck(CARD)


def test_gradcheck():
    checks.check_gradcheck(CARD)


def test_compile():
    checks.check_compile(CARD)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
@pytest.mark.parametrize("route", ["custom", "standard"])
def test_export_runs_in_onnx_runtime(route, dynamo):
    checks.check_export(CARD, route=route, dynamo=dynamo)


def test_bad_input():
    checks.check_bad_input(CARD)
"""

_EXAMPLE = """\
\"\"\"A small model using {name}, for `opbridge verify example.py:make --route custom`.\"\"\"

import torch

import {namespace}


class Model(torch.nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2({namespace}.{name}(self.fc1(x), 2.0))


def make():
    torch.manual_seed(0)
    return Model().eval(), (torch.randn(4, 32),)
"""

_README = """\
# {namespace}

The `{name}` operator (`y = cap * tanh(x / cap)`), defined once in C++ on the
opbridge SDK: PyTorch op `torch.ops.{namespace}.{name}` (eager, autograd,
torch.compile, torch.export), ONNX export by the `custom` route (domain
`{domain}`) or the `standard` route, and ONNX Runtime through
`lib{namespace}_ort.so`.

```bash
pip install --no-build-isolation -e .       # into the environment opbridge is installed in
pytest tests                                # the checks every opbridge operator gets
opbridge verify example.py:make --route custom
```

- `csrc/{name}/spec.h`: the contract (name, inputs, attributes, outputs, backward).
- `csrc/{name}/spec.cpp`, `kernel.cpp`: shape rule and kernels.
- `python/{namespace}/{name}.py`: the card (call, reference, standard decomposition,
  samples, benchmark inputs).
"""

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_DOMAIN = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def files(name: str, namespace: str, domain: str) -> dict[str, str]:
    """The project's files, relative path -> text."""
    from opbridge._library import VERSION

    if not _IDENTIFIER.match(name):
        raise ValueError(f"opbridge new-op: --name must be snake_case (a-z, 0-9, _), got {name!r}")
    if not _IDENTIFIER.match(namespace):
        raise ValueError(
            f"opbridge new-op: --namespace must be snake_case (a-z, 0-9, _), got {namespace!r}"
        )
    if namespace == "opbridge":
        raise ValueError("opbridge new-op: the namespace 'opbridge' belongs to opbridge itself")
    if not _DOMAIN.match(domain) or domain == "opbridge":
        raise ValueError(
            f"opbridge new-op: --domain must be a dotted name other than 'opbridge', got {domain!r}"
        )
    fields = {
        "name": name,
        "camel": camel(name),
        "namespace": namespace,
        "domain": domain,
        "sdk_version": ".".join(VERSION.split(".")[:2]),
    }
    return {
        "pyproject.toml": _PYPROJECT.format(**fields),
        "CMakeLists.txt": _CMAKE.format(**fields),
        "README.md": _README.format(**fields),
        f"csrc/{name}/spec.h": _SPEC_H.format(**fields),
        f"csrc/{name}/spec.cpp": _SPEC_CPP.format(**fields),
        f"csrc/{name}/kernel.cpp": _KERNEL_CPP.format(**fields),
        f"python/{namespace}/__init__.py": _INIT.format(**fields),
        f"python/{namespace}/{name}.py": _CARD.format(**fields),
        f"tests/test_{name}.py": _TESTS.format(**fields),
        "example.py": _EXAMPLE.format(**fields),
        ".gitignore": "/build/\n__pycache__/\n*.egg-info/\n",
    }


def write(
    directory: Path, name: str, namespace: str | None = None, domain: str | None = None
) -> list[Path]:
    namespace = namespace or f"{name}_ops"
    domain = domain or f"com.example.{namespace}"
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"opbridge new-op: {directory} exists and is not empty")
    written = []
    for relative, text in files(name, namespace, domain).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, help="the project folder to create (empty or new)")
    parser.add_argument("--name", required=True, help="the operator's name, snake_case (soft_cap)")
    parser.add_argument(
        "--namespace", default=None, help="PyTorch namespace and Python package (default NAME_ops)"
    )
    parser.add_argument(
        "--domain",
        default=None,
        help="ONNX domain of the custom route (default com.example.NAMESPACE)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        written = write(args.directory, args.name, args.namespace, args.domain)
    except (ValueError, FileExistsError) as error:
        print(error)
        return 2
    for path in written:
        print(path)
    directory = args.directory
    print(f"\nnext: pip install --no-build-isolation -e {directory} && pytest {directory}/tests")
    return 0
