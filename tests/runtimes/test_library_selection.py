"""A model's library nodes select their library wherever they are: in the
graph, in the body of one of the model's own functions, in an If branch, and
as the ``function`` route writes them (a library node with a model-local
function of the same domain and op type, the fallback body). In ONNX Runtime
and in OpenVINO, each in a fresh process, for a user's library (faulty_ops,
whose ShortGradient copies x: y = x).

Each model's function body computes -x, so the output says which one ran;
for a function-route export of the op, the runtimes' own profiling says it
too. And opbridge.runtimes.onnxruntime.InferenceSession takes onnxruntime.InferenceSession's
arguments in its order."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import faulty_library
import pytest

MODELS = """
import numpy as np
from onnx import TensorProto, helper

DOMAIN = "com.example.faulty"
OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)]


def io(name):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8])


def negation(domain, name):
    return helper.make_function(domain, name, ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                                [helper.make_opsetid("", 18)])


def model_of(nodes, functions=(), extra_opsets=()):
    graph = helper.make_graph(nodes, "g", [io("x")], [io("y")])
    model = helper.make_model(graph, opset_imports=OPSETS + list(extra_opsets),
                              functions=list(functions))
    model.ir_version = 10
    return model


library_node = helper.make_node("ShortGradient", ["x"], ["y"], domain=DOMAIN)
# The function route: the library node, and a local function of its domain
# and op type.
function_route = model_of([library_node], [negation(DOMAIN, "ShortGradient")])
# The library node inside the body of one of the model's own functions.
wrapper = helper.make_function(
    "local.wrap", "Wrap", ["x"], ["y"],
    [helper.make_node("ShortGradient", ["x"], ["y"], domain=DOMAIN)],
    [helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)])
in_function = model_of([helper.make_node("Wrap", ["x"], ["y"], domain="local.wrap")], [wrapper],
                       [helper.make_opsetid("local.wrap", 1)])
# The library node inside an If branch.
branch = helper.make_graph(
    [helper.make_node("ShortGradient", ["x"], ["b"], domain=DOMAIN)], "then", [], [io("b")])
other = helper.make_graph([helper.make_node("Neg", ["x"], ["c"])], "else", [], [io("c")])
condition = helper.make_node("Constant", [], ["cond"],
                             value=helper.make_tensor("t", TensorProto.BOOL, [], [True]))
in_branch = model_of([condition, helper.make_node("If", ["cond"], ["y"], then_branch=branch,
                                                  else_branch=other)])
MODELS = {"function_route": function_route, "in_function": in_function, "in_branch": in_branch}
x = np.arange(32, dtype=np.float32).reshape(4, 8) - 8.0
"""

RUN = """
import json, sys
import opbridge
{load}
results = {{}}
for name in sys.argv[2].split(","):
    model = MODELS[name]
    libraries = [lib.name for lib in opbridge.runtimes.model.libraries_for(model)]
    if sys.argv[1] == "ort":
        (y,) = opbridge.runtimes.onnxruntime.InferenceSession(model).run(None, {{"x": x}})
    else:
        y = opbridge.runtimes.openvino.compile_model(model)({{"x": x}})[0]
    ran = "kernel" if np.array_equal(y, x) else "body" if np.array_equal(y, -x) else "other"
    results[name] = [libraries, ran]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def faulty():
    return faulty_library.build()


ALL = "function_route,in_function,in_branch"


def _run(runtime: str, load: str, models: str = ALL) -> dict:
    code = textwrap.dedent(MODELS) + textwrap.dedent(RUN.format(load=load))
    result = subprocess.run(
        [sys.executable, "-c", code, runtime, models], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_a_user_librarys_nodes_run_its_kernel_wherever_they_are(faulty, runtime):
    results = _run(runtime, f"opbridge.load_library({str(faulty)!r})")
    for name in ("function_route", "in_function", "in_branch"):
        libraries, ran = results[name]
        assert libraries == ["opbridge", "faulty_ops"], (name, results)
        assert ran == "kernel", (name, results)


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_without_the_library_the_function_route_runs_its_bodies(runtime):
    # No library of the domain is loaded: the local function is the fallback,
    # not an error.
    libraries, ran = _run(runtime, "", "function_route")["function_route"]
    assert libraries == ["opbridge"] and ran == "body", (libraries, ran)


EXPORT = """
import json, sys
import numpy as np, onnx, onnxruntime, torch
import opbridge

opbridge.load_library(sys.argv[1])
# The body of the function route: -x, where the kernel copies x.
"""
EXPORT += faulty_library.register_card_code('b.op("Neg", x)')
EXPORT += """


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.faulty_ops.short_gradient(x) * 2.0


x = torch.randn(4, 8)
proto = opbridge.export.export(Model(), (x,), route="function", dynamo=True, verbose=False)
onnx.save(proto, sys.argv[2])
[node] = [n for n in proto.graph.node if n.domain == "com.example.faulty"]
feeds = {"x": x.numpy()}


def ran(y):
    kernel, body = np.allclose(y, 2 * x.numpy()), np.allclose(y, -2 * x.numpy())
    return "kernel" if kernel else "body" if body else "other"


options = onnxruntime.SessionOptions()
options.enable_profiling = True
options.profile_file_prefix = sys.argv[3]
session = opbridge.runtimes.onnxruntime.InferenceSession(proto, options)
(y,) = session.run(None, feeds)
with open(session.end_profiling()) as file:
    ops = {e["name"]: e["args"].get("op_name") for e in json.load(file) if e.get("cat") == "Node"}
stock = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
print(json.dumps({
    "node": node.name,
    "functions": [[f.domain, f.name] for f in proto.functions],
    "libraries": [lib.name for lib in opbridge.runtimes.model.libraries_for(proto)],
    "ort": ran(y),
    "stock": ran(stock.run(None, feeds)[0]),
    "profiled": ops.get(node.name + "_kernel_time"),
    "library_kernels": sorted(opbridge.runtimes.onnxruntime.library_kernels(proto, feeds)),
}))
"""

OPENVINO = """
import json, sys
import numpy as np, onnx
import opbridge

opbridge.load_library(sys.argv[1])
x = np.linspace(-2.0, 2.0, 32, dtype=np.float32).reshape(4, 8)
compiled = opbridge.runtimes.openvino.compile_model(sys.argv[2])
y = compiled({"x": x})[0]
ran = "kernel" if np.allclose(y, 2 * x) else "body" if np.allclose(y, -2 * x) else "other"
kernels = opbridge.runtimes.get("openvino").library_kernels(onnx.load(sys.argv[2]), {"x": x})
print(json.dumps({"ran": ran, "library_kernels": sorted(kernels)}))
"""


def _python(code: str, *args) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(faulty, tmp_path_factory):
    """A function-route export of the user's op (its body -x, its kernel x)
    run in ONNX Runtime in a fresh process: the saved model and what ran."""
    folder = tmp_path_factory.mktemp("function_route")
    path = folder / "model.onnx"
    return path, _python(EXPORT, faulty, path, folder / "profile")


def test_a_function_route_export_of_a_user_op_runs_its_kernel_in_onnxruntime(exported):
    _, found = exported
    assert found["functions"] == [["com.example.faulty", "ShortGradient"]], found
    assert found["libraries"] == ["opbridge", "faulty_ops"], found
    # The kernel's value, and ONNX Runtime's own profiling names the library
    # op for the node (an inlined body would show Neg under other names).
    assert found["ort"] == "kernel" and found["stock"] == "body", found
    assert found["profiled"] == "ShortGradient", found
    assert found["library_kernels"] == [found["node"]], found


def test_a_function_route_export_of_a_user_op_runs_its_kernel_in_a_fresh_openvino(faulty, exported):
    path, found = exported
    result = _python(OPENVINO, faulty, path)
    assert result == {"ran": "kernel", "library_kernels": [found["node"]]}, result


def test_inference_session_takes_onnxruntimes_arguments_in_its_order(tmp_path):
    import onnxruntime
    import torch

    import opbridge

    path = tmp_path / "m.onnx"
    x = torch.randn(2, 8)
    opbridge.export.export(
        torch.nn.Sequential(opbridge.nn.RMSNorm(8)).eval(), (x,), str(path), route="custom"
    )
    options = onnxruntime.SessionOptions()
    session = opbridge.runtimes.onnxruntime.InferenceSession(
        path, options, ["CPUExecutionProvider"]
    )
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(y), opbridge.rms_norm(x, torch.ones(8)))
    assert session.get_providers() == ["CPUExecutionProvider"]
