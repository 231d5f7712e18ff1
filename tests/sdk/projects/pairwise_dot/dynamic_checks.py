"""pairwise_dot of the package named first on the command line, with
symbolic sizes, in the PyTorch library that OPBRIDGE_TORCH_ADAPTER picks
(default or stable, named second): torch.export with a Dim on
F, torch.compile with dynamic shapes and no recompile for a new F, and both
ONNX exporters with a dynamic F, run in ONNX Runtime and OpenVINO at another
F."""

import importlib
import sys

import numpy as np
import torch

import opbridge

package, kind = sys.argv[1], sys.argv[2]
ops = importlib.import_module(package)
assert ops.LIBRARY.torch_adapter.kind == kind, ops.LIBRARY.torch_adapter


class Model(torch.nn.Module):
    def forward(self, x):
        return ops.pairwise_dot(x) * 2.0


def _reference(x):
    f = x.shape[1]
    i, j = torch.triu_indices(f, f, offset=1)
    return (x @ x.transpose(1, 2))[:, i, j] * 2.0


x = torch.randn(3, 6, 8)
other = torch.randn(5, 9, 8)

# torch.export: the output's second size is a formula of the Dim f.
batch, f = torch.export.Dim("batch"), torch.export.Dim("f", min=3, max=64)
program = torch.export.export(Model(), (x,), dynamic_shapes={"x": {0: batch, 1: f}})
out = next(n for n in program.graph.nodes if n.op == "output").args[0][0].meta["val"]
size = str(out.shape[1])
assert "f" in size or "s" in size, f"not symbolic: {out.shape}"
assert not isinstance(out.shape[1], int), out.shape
torch.testing.assert_close(program.module()(other), _reference(other))

# torch.compile with dynamic shapes: one graph for every F.
torch._dynamo.reset()
torch._dynamo.utils.counters.clear()
compiled = torch.compile(Model(), fullgraph=True, dynamic=True)
for features in (4, 7, 11):
    y = torch.randn(2, features, 8)
    torch.testing.assert_close(compiled(y), _reference(y))
frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
assert frames == 1, f"{frames} graphs for three values of F"

# Both ONNX exporters, dynamic B and F, by the custom and standard routes;
# ONNX Runtime's shape inference and OpenVINO's keep the computed size
# unknown, and both run the model at another B and F.
for dynamo in (True, False):
    for route in ("custom", "standard"):
        proto = opbridge.export.export(
            Model(), (x,), route=route, dynamo=dynamo, dynamic_shapes={"x": {0: batch, 1: f}}
        )
        session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
        declared = session.get_outputs()[0].shape
        assert not isinstance(declared[1], int) or declared[1] < 0, (route, dynamo, declared)
        (got,) = session.run(None, {session.get_inputs()[0].name: other.numpy()})
        np.testing.assert_allclose(got, _reference(other).numpy(), rtol=1e-5, atol=1e-5)
        # OpenVINO with the library's extension: the computed size is dynamic.
        compiled = opbridge.runtimes.openvino.compile_model(proto)
        assert compiled.outputs[0].partial_shape[1].is_dynamic, compiled.outputs[0].partial_shape
        got = compiled({compiled.inputs[0]: other.numpy()})[compiled.outputs[0]]
        np.testing.assert_allclose(got, _reference(other).numpy(), rtol=1e-5, atol=1e-5)
print(f"pairwise_dot: symbolic sizes under the {kind} PyTorch library: export, compile, ONNX")
