"""What a hostile-model fuzzer found in OpenVINO, each as its smallest
model: an IR without a required attribute, errors lost at one thread,
float64 computed in float32, and the messages (an input of unknown rank, a
NUL in a node name, the library named, the dtype OPBRIDGE_CHECK names)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import opbridge

from ort_helpers import single_node_model

ov = pytest.importorskip("openvino")
openvino_runtime = pytest.importorskip("opbridge.openvino")
if not opbridge.libraries()[0].openvino_library_path.is_file():
    pytest.skip("libopbridge_openvino.so was not built", allow_module_level=True)

FLOAT = TensorProto.FLOAT
DOMAIN = opbridge.libraries()[0].onnx_domain


def scaled_clamp_ir(tmp_path, *, drop: str | None = None):
    """An IR of one ScaledClamp (scale 2, min_val -1), saved by ov.save_model;
    ``drop`` removes that attribute from the layer."""
    model = single_node_model(
        "ScaledClamp", [("x", FLOAT, [2, 4])], {"scale": 2.0, "min_val": -1.0}
    )
    path = tmp_path / "scaled_clamp.xml"
    ov.save_model(openvino_runtime.read_model(model), path, compress_to_fp16=False)
    if drop is not None:
        text = path.read_text()
        pattern = rf'\s{drop}="[^"]*"'
        assert re.search(pattern, text), text
        path.write_text(re.sub(pattern, "", text))
    return path


def test_an_ir_without_a_required_attribute_is_refused_naming_it(tmp_path):
    path = scaled_clamp_ir(tmp_path, drop="scale")
    core = ov.Core()
    core.add_extension(openvino_runtime.get_library_path())
    message = (
        "attribute 'scale' must be present with type FLOAT (float): it has no default "
        "and the node does not have it"
    )
    with pytest.raises(RuntimeError, match=re.escape(message)):
        core.read_model(path)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        openvino_runtime.compile_model(path)


def test_an_ir_without_an_attribute_that_has_a_default_takes_the_default(tmp_path):
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    full = openvino_runtime.compile_model(scaled_clamp_ir(tmp_path))
    assert np.array_equal(full({0: x})[0], np.clip(2 * x, -1.0, 6.0))
    (tmp_path / "a").mkdir()
    dropped = openvino_runtime.compile_model(scaled_clamp_ir(tmp_path / "a", drop="min_val"))
    assert np.array_equal(dropped({0: x})[0], np.clip(2 * x, 0.0, 6.0))  # min_val's default


def test_a_node_built_in_python_without_a_required_attribute_is_refused():
    from openvino.utils.node_factory import NodeFactory

    factory = NodeFactory()
    factory.add_extension(openvino_runtime.get_library_path())
    x = ov.opset13.parameter([2, 4], ov.Type.f32, name="x")
    node = factory.create("ScaledClamp", [x.output(0)], {"scale": 2.0})
    assert node.get_output_element_type(0) == ov.Type.f32
    with pytest.raises(RuntimeError, match="attribute 'scale' must be present"):
        factory.create("ScaledClamp", [x.output(0)], {"min_val": 0.5})


# A wrong-length weight that only a run can see (the dimensions are dynamic):
# the node's run-time shape check raises in evaluate().
_LOST_ERROR = """
import sys, numpy as np
import opbridge, opbridge.openvino as ovr
from onnx import TensorProto, helper
threads = int(sys.argv[1])
dom = opbridge.libraries()[0].onnx_domain
node = helper.make_node("RmsNorm", ["x", "w"], ["y"], domain=dom, eps=1e-6)
graph = helper.make_graph([node], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "d"]),
     helper.make_tensor_value_info("w", TensorProto.FLOAT, ["k"])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(dom, 1)])
feeds = {"x": np.ones((2, 8), np.float32), "w": np.ones(5, np.float32)}
for call in range(4):
    compiled = ovr.compile_model(model, threads=threads)
    runs = {
        "compiled": lambda: compiled(feeds),
        "request": lambda: compiled.create_infer_request().infer(feeds),
        "session": lambda: ovr.Session(compiled).run(None, feeds),
    }
    for name, run in runs.items():
        try:
            run()
            print(call, name, "no error", flush=True)
        except RuntimeError as error:
            ok = "must be 1-D with 8 elements" in str(error)
            print(call, name, "error" if ok else "other error: " + str(error)[:200], flush=True)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_every_error_raised_while_the_graph_runs_is_kept_at_any_thread_count(threads):
    """OpenVINO's own synchronous infer() loses such an error at one thread
    (and a later call crashes); compile_model's models and the sessions keep
    it. Own process: a lost error may leave OpenVINO broken."""
    run = subprocess.run(
        [sys.executable, "-c", _LOST_ERROR, str(threads)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPBRIDGE_CHECK": ""},
    )
    lines = [line for line in run.stdout.splitlines() if line[:1].isdigit()]
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert len(lines) == 12 and all(line.endswith(" error") for line in lines), run.stdout


def test_openvinos_own_infer_at_one_thread_still_loses_the_error():
    """A known fault of OpenVINO 2026.4's CPU plugin (the guide warns a
    user's own Core of it): fails when a release keeps the error, so the
    wrapper's way round it can then go."""
    code = _LOST_ERROR.replace(
        "compiled = ovr.compile_model(model, threads=threads)",
        "import openvino as ov\n"
        "    core = ov.Core(); core.add_extension(ovr.get_library_path())\n"
        "    compiled = core.compile_model(core.read_model(model.SerializeToString(), b''),"
        " 'CPU', {'INFERENCE_NUM_THREADS': threads})",
    ).replace("for call in range(4):", "for call in range(1):")
    run = subprocess.run(
        [sys.executable, "-c", code, "1"], capture_output=True, text=True, timeout=300
    )
    first = next(line for line in run.stdout.splitlines() if line[:1].isdigit())
    assert first == "0 compiled no error", run.stdout + run.stderr[-2000:]


def float64_rms_norm():
    module = opbridge.nn.RMSNorm(8).double().eval()
    x = torch.randn(2, 8, dtype=torch.float64)
    return module, x, opbridge.onnx.export(module, (x,), route="custom", verbose=False)


def test_float64_is_warned_of_naming_the_inputs_and_what_openvino_does():
    module, x, proto = float64_rms_norm()
    with pytest.warns(opbridge.runtimes.PrecisionWarning) as caught:
        compiled = openvino_runtime.compile_model(proto)
    message = str(caught[0].message)
    assert "float64 (input 'x', output " in message
    assert "computes it in float32" in message and "3.4e38" in message
    # What it warns of: inf saturates, where float64 (and ONNX Runtime) give NaN.
    inf = x.clone()
    inf[0, 0] = float("inf")
    (got,) = compiled({0: inf.numpy()}).values()
    assert got.dtype == np.float64 and np.isfinite(got[0]).all()
    assert torch.isnan(module(inf)[0]).any()
    float32 = export_float32()
    with warnings.catch_warnings():
        warnings.simplefilter("error", opbridge.runtimes.PrecisionWarning)
        openvino_runtime.compile_model(float32)  # float32: no warning


def export_float32():
    module = opbridge.nn.RMSNorm(8).eval()
    return opbridge.onnx.export(module, (torch.randn(2, 8),), route="custom", verbose=False)


def test_verify_in_openvino_reports_float64_and_does_not_warn():
    module, x, _ = float64_rms_norm()
    with warnings.catch_warnings():
        warnings.simplefilter("error", opbridge.runtimes.PrecisionWarning)
        report = opbridge.verify(module, (x,), route="custom", runtime="openvino", layers=False)
    (check,) = [c for c in report.structure if c.name == "no dtype OpenVINO computes in another"]
    assert check.status == "warn" and "float64 (input 'x'" in check.detail
    report = opbridge.verify(
        module.float(), (x.float(),), route="custom", runtime="openvino", layers=False
    )
    (check,) = [c for c in report.structure if c.name == "no dtype OpenVINO computes in another"]
    assert check.status == "pass"


def test_an_input_of_unknown_rank_still_gives_the_output_dtype():
    node = helper.make_node("RmsNorm", ["x", "w"], ["y"], domain=DOMAIN, eps=1e-6)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", FLOAT, None),
            helper.make_tensor_value_info("w", FLOAT, [8]),
        ],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    read = openvino_runtime.read_model(model)
    assert read.outputs[0].get_element_type() == ov.Type.f32
    assert read.outputs[0].get_partial_shape().rank.is_dynamic


def test_a_nul_in_a_node_name_does_not_cut_the_reason():
    model = single_node_model("RmsNorm", [("x", FLOAT, [2, 8]), ("w", FLOAT, [5])], {"eps": 1e-6})
    model.graph.node[0].name = "ab\x00cd"
    with pytest.raises(RuntimeError) as caught:
        openvino_runtime.compile_model(model)
    message = str(caught.value)
    assert "argument 'weight' must be 1-D with 8 elements" in message, message
    assert "ab\\x00cd" in message


def test_the_wrapper_names_the_openvino_library():
    model = single_node_model("RmsNrm", [("x", FLOAT, [2, 8])], {})
    with pytest.raises(RuntimeError, match=re.escape("libopbridge_openvino.so")) as caught:
        openvino_runtime.compile_model(model)
    assert "_ort.so" not in str(caught.value)


def test_opbridge_check_names_the_models_dtype_of_an_input_openvino_converts():
    code = (
        "import numpy as np, torch, opbridge, opbridge.openvino as ovr\n"
        "m = opbridge.nn.RMSNorm(8).half().eval(); x = torch.randn(2, 8, dtype=torch.float16)\n"
        "p = opbridge.onnx.export(m, (x,), route='custom', verbose=False)\n"
        "xx = x.numpy().copy(); xx[0, 0] = np.nan\n"
        "try:\n    ovr.compile_model(p)({0: xx}); print('no error')\n"
        "except RuntimeError as e:\n"
        "    print([line for line in str(e).splitlines() if 'argument' in line][-1])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPBRIDGE_CHECK": "1"},
    )
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert "argument 'x' contains NaN" in last, last
    assert "'x' is float16 in the model" in last, last
