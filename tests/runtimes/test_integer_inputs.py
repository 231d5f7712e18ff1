"""A user's operator with integer inputs (an int64 ``positions``, an int32
``offsets``) and an int64 output, built outside the repository with the SDK:
its kernel reads each as its spec declares and refuses any other dtype.
Exported by every route and both exporters, it runs in ONNX Runtime,
OpenVINO (which computes int64 as int32 inside its CPU plugin: the adapter
hands the kernel int64 again), ExecuTorch and AOTInductor, equal to PyTorch.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto

import opbridge
import opbridge.sdk.build
from opbridge.ops import Card, Sample, _card
from opbridge.sdk.build import _sdk_digest

from ort_helpers import single_node_model
from paths import ROOT

NAMESPACE = "int_ops"
DOMAIN = "org.integer_inputs"

# y[r, c] = x[r, c] + step * (positions[r] + offsets[r]); next_positions = positions + 1.
# The kernel reads positions as int64 and offsets as int32 only.
SOURCE = r"""
#include <cstdint>
#include <string>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/spec.h"

namespace int_ops {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::TensorInfo;

Status InferPositionShift(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs);
Status LaunchPositionShift(const KernelArgs& args);

const opbridge::OpSpec kPositionShiftSpec =
    opbridge::OpSpec::Builder("position_shift", "PositionShift")
        .Doc("y = x + step * (positions + offsets)[:, None]; next_positions = positions + 1.")
        .Inputs({opbridge::Input("x"), opbridge::Input("positions"), opbridge::Input("offsets")})
        .Attrs({opbridge::Attr::Float("step", 0.5)})
        .Outputs({"y", "next_positions"})
        .Infer(InferPositionShift)
        .Forward(LaunchPositionShift);

namespace {

Status CheckIndex(const char* argument, const TensorInfo& given, const char* dtype,
                  const TensorInfo& x) {
  if (given.dtype != dtype) {
    return opbridge::ArgError(kPositionShiftSpec, argument,
                              std::string("must be ") + dtype + ", got " + given.dtype);
  }
  const int64_t rows = x.shape.empty() ? -1 : static_cast<int64_t>(x.shape[0]);
  if (given.shape.size() != 1 || opbridge::DimsDiffer(given.shape[0], rows)) {
    return opbridge::ArgError(kPositionShiftSpec, argument,
                              "must be 1-D with one value per row of x " +
                                  opbridge::FormatShape(x.shape) + ", got shape " +
                                  opbridge::FormatShape(given.shape));
  }
  return Status::Ok();
}

template <typename T>
void Shift(const KernelArgs& args, int64_t rows, int64_t cols) {
  const T* x = static_cast<const T*>(args.inputs[0]);
  const int64_t* positions = static_cast<const int64_t*>(args.inputs[1]);
  const int32_t* offsets = static_cast<const int32_t*>(args.inputs[2]);
  T* y = static_cast<T*>(args.outputs[0]);
  int64_t* next = static_cast<int64_t*>(args.outputs[1]);
  const T step = static_cast<T>(args.attrs[0].number);
  args.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T shift = step * static_cast<T>(positions[r] + offsets[r]);
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + shift;
      next[r] = positions[r] + 1;
    }
  });
}

}  // namespace

// x: float32 or float64 [rows, cols]; positions: int64 [rows]; offsets:
// int32 [rows]. y: x's; next_positions: int64 [rows].
Status InferPositionShift(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  const opbridge::OpSpec& spec = kPositionShiftSpec;
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckInputCount(spec, inputs));
  const TensorInfo& x = inputs[0];
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckFloatingDtype(spec, "x", x.dtype));
  OPBRIDGE_RETURN_IF_ERROR(opbridge::CheckRank(spec, "x", x.shape, 2, "[rows, cols]"));
  OPBRIDGE_RETURN_IF_ERROR(CheckIndex("positions", inputs[1], "int64", x));
  OPBRIDGE_RETURN_IF_ERROR(CheckIndex("offsets", inputs[2], "int32", x));
  *outputs = {x, TensorInfo{true, "int64", inputs[1].shape}};
  return Status::Ok();
}

// The kernel reads positions as int64 and offsets as int32, nothing else.
Status LaunchPositionShift(const KernelArgs& args) {
  const std::vector<TensorInfo>& in = args.input_infos;
  if (in[1].dtype != "int64") {
    return opbridge::ArgError(kPositionShiftSpec, "positions",
                              "must be int64 in the kernel, got " + in[1].dtype);
  }
  if (in[2].dtype != "int32") {
    return opbridge::ArgError(kPositionShiftSpec, "offsets",
                              "must be int32 in the kernel, got " + in[2].dtype);
  }
  const int64_t rows = in[0].shape[0];
  const int64_t cols = in[0].shape[1];
  return opbridge::DispatchFloating(kPositionShiftSpec, "x", in[0].dtype, [&](auto zero) {
    Shift<decltype(zero)>(args, rows, cols);
  });
}

}  // namespace int_ops

OPBRIDGE_REGISTER_SPEC(int_ops::kPositionShiftSpec)
"""


def position_shift(x, positions, offsets, step=0.5):
    return torch.ops.int_ops.position_shift.default(x, positions, offsets, step)


def reference(x, positions, offsets, step=0.5):
    shift = step * (positions + offsets.to(torch.int64)).to(x.dtype)
    return x + shift[:, None], positions + 1


def standard(b, x, positions, offsets, *, step):
    total = b.op("Add", positions, b.op("Cast", offsets, to=TensorProto.INT64))
    shift = b.op("Mul", b.op("CastLike", total, x), b.constant(step, like=x))
    y = b.op("Add", x, b.op("Unsqueeze", shift, b.ints([1])))
    return y, b.op("Add", positions, b.ints([1]))


def inputs(rows=6, cols=8, dtype=torch.float32, *, base=0, seed=0):
    """x, positions (int64, from ``base``) and offsets (int32)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64).to(dtype)
    positions = base + torch.randint(0, 1000, (rows,), generator=g, dtype=torch.int64)
    offsets = torch.randint(-50, 50, (rows,), generator=g, dtype=torch.int32)
    return x, positions, offsets


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    del requires_grad, large
    yield Sample((*inputs(dtype=dtype, seed=seed), 0.25), label="typical")
    yield Sample((*inputs(rows=1, cols=3, dtype=dtype, seed=seed),), label="one row")


def bench_inputs(shape, dtype, requires_grad=False):
    del requires_grad
    return (*inputs(shape[0], shape[1], dtype), 0.25)


CARD = Card(
    name="position_shift",
    namespace=NAMESPACE,
    call=position_shift,
    standard=standard,
    reference=reference,
    samples=samples,
    bench_inputs=bench_inputs,
    bench_backward=False,
)


@pytest.fixture(scope="module")
def library():
    """The user's library, built (or reused) under build/test-jit, with its
    card registered for this module's tests only."""
    # Under the SDK's digest, as faulty_library's build: a build with an
    # older SDK is removed with its folder.
    root = ROOT / "build" / "test-jit" / _sdk_digest()[:16]
    sources = root / "int_ops-src"
    sources.mkdir(parents=True, exist_ok=True)
    source = sources / "position_shift.cpp"
    if not source.is_file() or source.read_text() != SOURCE:
        source.write_text(SOURCE)
    built = opbridge.sdk.build.load(
        "int_ops",
        [source],
        onnx_domain=DOMAIN,
        adapters=["torch", "ort", "openvino", "executorch"],
        build_directory=root,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))
        opbridge.ops.register_card(CARD)
        yield built


class Model(torch.nn.Module):
    """The op's int64 output both a model output and another node's input."""

    def forward(self, x, positions, offsets):
        y, next_positions = position_shift(x, positions, offsets, 0.25)
        return y * 2.0, next_positions, next_positions * 3 - 1


def expected(args):
    with torch.no_grad():
        return [t.numpy() for t in Model()(*args)]


def check_outputs(got, want, what):
    assert len(got) == len(want), what
    y, *integers = (np.asarray(g) for g in got)
    for k, (given, wanted) in enumerate(zip(integers, want[1:], strict=True), start=1):
        assert given.dtype == np.int64, f"{what}: output {k} is {given.dtype}"
        np.testing.assert_array_equal(given, wanted, err_msg=f"{what}: output {k}")
    np.testing.assert_allclose(y, want[0], rtol=1e-6, atol=1e-5, err_msg=what)


def input_types(proto) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in proto.graph.input}


ROUTES = [
    pytest.param(route, dynamo, id=f"{route}-{'dynamo' if dynamo else 'legacy'}")
    for route in ("standard", "ort", "custom", "function")
    for dynamo in (True, False)
]


def export(route, dynamo, args):
    proto = opbridge.export.export(Model().eval(), args, route=route, dynamo=dynamo, verbose=False)
    onnx.checker.check_model(proto)
    types = list(input_types(proto).values())
    assert types == [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32], types
    library_nodes = [n for n in proto.graph.node if n.domain == DOMAIN]
    assert bool(library_nodes) == (route in ("custom", "function")), route
    return proto


def feeds_of(names, args):
    return {name: t.numpy() for name, t in zip(names, args, strict=True)}


def run_onnxruntime(proto, args):
    session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
    return session.run(None, feeds_of([i.name for i in session.get_inputs()], args))


def run_openvino(proto_or_model, args):
    compiled = opbridge.runtimes.openvino.compile_model(proto_or_model)
    results = compiled(feeds_of([p.get_any_name() for p in compiled.inputs], args))
    return [results[port] for port in compiled.outputs]


def test_pytorch_runs_the_kernel_on_the_declared_dtypes(library):
    assert opbridge.ops.check_card(CARD) == []
    for base in (0, 2**33):
        args = inputs(base=base)
        for got, want in zip(position_shift(*args, 0.25), reference(*args, 0.25), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    x, positions, offsets = inputs()
    with pytest.raises(RuntimeError, match=r"argument 'positions' must be int64, got int32"):
        position_shift(x, positions.to(torch.int32), offsets)
    with pytest.raises(RuntimeError, match=r"argument 'offsets' must be int32, got int64"):
        position_shift(x, positions, offsets.to(torch.int64))


@pytest.mark.parametrize(("route", "dynamo"), ROUTES)
def test_onnxruntime_runs_every_route_with_int64_beyond_int32(library, route, dynamo):
    # Positions past 2**32: an int32 anywhere on the way would lose them.
    args = inputs(base=2**33)
    proto = export(route, dynamo, args)
    check_outputs(run_onnxruntime(proto, args), expected(args), f"ONNX Runtime, {route}")


@pytest.mark.parametrize(("route", "dynamo"), ROUTES)
def test_openvino_runs_every_route(library, route, dynamo):
    pytest.importorskip("openvino")
    if not library.adapter_path("openvino").is_file():
        pytest.skip("the library's OpenVINO extension was not built")
    args = inputs()
    proto = export(route, dynamo, args)
    check_outputs(run_openvino(proto, args), expected(args), f"OpenVINO, {route}")


def test_openvino_converts_a_torch_export_program(library):
    ov = pytest.importorskip("openvino")
    if not library.adapter_path("openvino").is_file():
        pytest.skip("the library's OpenVINO extension was not built")
    args = inputs()
    with torch.no_grad():
        program = torch.export.export(Model().eval(), args)
    converted = ov.convert_model(
        program, extension=[opbridge.runtimes.openvino.get_library_path(library)]
    )
    types = [p.get_element_type().get_type_name() for p in converted.inputs]
    assert types == ["f32", "i64", "i32"], types
    check_outputs(run_openvino(converted, args), expected(args), "OpenVINO, torch.export")


def test_executorch_runs_the_program_with_int64_beyond_int32(library, tmp_path):
    pytest.importorskip("executorch")
    from opbridge.deploy import executorch

    assert executorch.load_kernels(library) == ["int_ops::position_shift.out"]
    args = inputs(base=2**33)
    pte = executorch.to_pte(Model().eval(), args, tmp_path / "model.pte")
    got = [t.numpy() for t in executorch.run_pte(pte, args)]
    check_outputs(got, expected(args), "ExecuTorch")


def test_aotinductor_runs_the_package_with_int64_beyond_int32(library, tmp_path):
    args = inputs(base=2**33)
    with torch.no_grad():
        program = torch.export.export(Model().eval(), args)
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "model.pt2")
    )
    loaded = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        got = [t.numpy() for t in loaded(*args)]
    check_outputs(got, expected(args), "AOTInductor")


def test_openvino_loses_int64_beyond_int32_as_its_own_operators_do(library):
    """What the CPU plugin's int32 cannot hold is lost before any node runs,
    the library's as OpenVINO's own: the custom route gives what the
    standard route gives, PyTorch's numbers for positions wrapped to int32."""
    pytest.importorskip("openvino")
    if not library.adapter_path("openvino").is_file():
        pytest.skip("the library's OpenVINO extension was not built")
    args = inputs(base=2**33)
    custom = run_openvino(export("custom", True, args), args)
    standard = run_openvino(export("standard", True, args), args)
    wrapped = (args[0], args[1].to(torch.int32).to(torch.int64), args[2])
    check_outputs(custom, expected(wrapped), "OpenVINO, custom, beyond int32")
    check_outputs(standard, expected(wrapped), "OpenVINO, standard, beyond int32")


def node_model(positions_type=TensorProto.INT64, offsets_type=TensorProto.INT32, rows="n"):
    """One PositionShift node, x [rows, 4] and the index inputs [``rows``]."""
    return single_node_model(
        "PositionShift",
        [
            ("x", TensorProto.FLOAT, ["rows", 4]),
            ("positions", positions_type, [rows]),
            ("offsets", offsets_type, [rows]),
        ],
        {"step": 0.25},
        outputs=[("y", TensorProto.FLOAT), ("next_positions", TensorProto.INT64)],
        domain=DOMAIN,
    )


NAME = r"int_ops::position_shift \(ONNX org\.integer_inputs::PositionShift\): "
WRONG_DTYPES = [
    pytest.param(
        TensorProto.INT32,
        TensorProto.INT32,
        "'positions' must be int64, got int32",
        id="int32 positions",
    ),
    pytest.param(
        TensorProto.FLOAT,
        TensorProto.INT32,
        "'positions' must be int64, got float32",
        id="float positions",
    ),
    pytest.param(
        TensorProto.INT64,
        TensorProto.INT64,
        "'offsets' must be int32, got int64",
        id="int64 offsets",
    ),
]


@pytest.mark.parametrize(("positions_type", "offsets_type", "message"), WRONG_DTYPES)
def test_a_model_of_other_dtypes_is_refused_naming_the_argument(
    library, positions_type, offsets_type, message
):
    """A model whose tensor has another dtype than the spec declares is
    refused in both runtimes with the same words: OpenVINO's conversion of
    int64 to int32 and back makes no int32 look like an int64, nor an int64
    like an int32."""
    model = node_model(positions_type, offsets_type)
    with pytest.raises(Exception, match=NAME + "argument " + message):
        opbridge.runtimes.onnxruntime.InferenceSession(model)
    if importlib.util.find_spec("openvino") and library.adapter_path("openvino").is_file():
        with pytest.raises(RuntimeError, match=NAME + "argument " + message + r" \[node 'node0'\]"):
            opbridge.runtimes.openvino.compile_model(model)


def test_a_bad_run_is_an_error_naming_the_argument(library):
    """Sizes known only at run: checked before the kernel, in OpenVINO with
    no note about dtypes it changed (the kernel gets the model's)."""
    x = np.zeros((3, 4), dtype=np.float32)
    feeds = {
        "x": x,
        "positions": np.arange(5, dtype=np.int64),
        "offsets": np.zeros(5, dtype=np.int32),
    }
    message = (
        NAME
        + r"argument 'positions' must be 1-D with one value per row of x \[3, 4\], got shape \[5\]"
    )
    session = opbridge.runtimes.onnxruntime.InferenceSession(node_model())
    with pytest.raises(Exception, match=message):
        session.run(None, feeds)
    if importlib.util.find_spec("openvino") and library.adapter_path("openvino").is_file():
        compiled = opbridge.runtimes.openvino.compile_model(node_model())
        with pytest.raises(RuntimeError, match=message) as raised:
            compiled(feeds)
        assert "other dtypes" not in str(raised.value)
        # The same compiled model runs a good request afterwards.
        good = {
            **feeds,
            "positions": np.arange(3, dtype=np.int64),
            "offsets": np.ones(3, dtype=np.int32),
        }
        results = compiled(good)
        y, next_positions = (results[port] for port in compiled.outputs)
        np.testing.assert_array_equal(next_positions, np.arange(1, 4))
        np.testing.assert_allclose(y, 0.25 * (np.arange(3) + 1)[:, None] + x)


def test_the_openvino_node_takes_the_model_types_back(library):
    """The node's own evaluate, as OpenVINO's CPU plugin calls it: int32
    positions (the plugin's int64) reach the kernel as int64, an int64
    output the plugin takes as int32 is converted as its Convert does, and
    an output tensor of another size of element is an error, not a write."""
    ov = pytest.importorskip("openvino")
    if not library.adapter_path("openvino").is_file():
        pytest.skip("the library's OpenVINO extension was not built")
    model = opbridge.runtimes.openvino.read_model(node_model())
    (node,) = [op for op in model.get_ordered_ops() if op.get_type_name() == "PositionShift"]
    assert [node.get_output_element_type(k).get_type_name() for k in range(2)] == ["f32", "i64"]
    x = np.zeros((3, 4), dtype=np.float32)
    positions = np.array([5, -7, 2**31 - 1], dtype=np.int32)
    offsets = np.ones(3, dtype=np.int32)
    given = [ov.Tensor(x), ov.Tensor(positions), ov.Tensor(offsets)]
    for next_type, want in ((ov.Type.i64, [6, -6, 2**31]), (ov.Type.i32, [6, -6, -(2**31)])):
        outputs = [ov.Tensor(ov.Type.f32, [3, 4]), ov.Tensor(next_type, [3])]
        assert node.evaluate(outputs, given)
        np.testing.assert_array_equal(outputs[1].data, want)
        np.testing.assert_allclose(outputs[0].data, 0.25 * (positions + 1.0)[:, None] + x)
    with pytest.raises(
        RuntimeError,
        match=NAME + "output 'y' is float32 by the op's shape rule, but OpenVINO gives the "
        "node a float16 tensor for it",
    ):
        node.evaluate([ov.Tensor(ov.Type.f16, [3, 4]), ov.Tensor(ov.Type.i64, [3])], given)
    with pytest.raises(
        RuntimeError, match=NAME + "argument 'positions' must be int64, got float32"
    ):
        node.evaluate(outputs, [given[0], ov.Tensor(positions.astype(np.float32)), given[2]])


def test_openvino_keeps_an_int64_output_only_the_model_outputs_read(library):
    """next_positions straight to the model's output: the kernel's int64,
    beyond int32's range too (2**31 - 1 + 1)."""
    pytest.importorskip("openvino")
    if not library.adapter_path("openvino").is_file():
        pytest.skip("the library's OpenVINO extension was not built")
    x = np.zeros((3, 4), dtype=np.float32)
    positions = np.array([5, -7, 2**31 - 1], dtype=np.int64)
    feeds = {"x": x, "positions": positions, "offsets": np.zeros(3, dtype=np.int32)}
    compiled = opbridge.runtimes.openvino.compile_model(node_model())
    next_positions = compiled(feeds)[compiled.outputs[1]]
    assert next_positions.dtype == np.int64
    np.testing.assert_array_equal(next_positions, [6, -6, 2**31])
