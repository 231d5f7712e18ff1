"""Hostile and odd input, concurrency, versions, loading and OPBRIDGE_CHECK."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge.demo import build_demo

from op_cases import OPS
from ort_helpers import run, session, single_node_model
from processes import python_code

# ----------------------------------------------------------- odd layouts


def test_expanded_stride_zero_inputs():
    x = torch.randn(1, 8).expand(5, 8)
    w = torch.ones(1).expand(8)
    assert x.stride() == (0, 1) and w.stride() == (0,)
    torch.testing.assert_close(opbridge.rms_norm(x, w), OPS["rms_norm"].reference(x, w))
    torch.testing.assert_close(opbridge.scaled_clamp(x, 3.0), OPS["scaled_clamp"].reference(x, 3.0))


def test_very_large_dimensions():
    x = torch.randn(1, 1 << 20)
    w = torch.rand(1 << 20) + 0.5
    torch.testing.assert_close(
        opbridge.rms_norm(x, w), OPS["rms_norm"].reference(x, w), atol=1e-5, rtol=1e-5
    )
    (got,) = run(
        single_node_model(
            "RmsNorm",
            [("x", TensorProto.FLOAT, [1, 1 << 20]), ("w", TensorProto.FLOAT, [1 << 20])],
            {"eps": 1e-6},
        ),
        [x.numpy(), w.numpy()],
    )
    np.testing.assert_allclose(got, OPS["rms_norm"].reference(x, w).numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (0,)])
def test_empty_and_zero_size_in_onnx_runtime(shape):
    x = np.zeros(shape, np.float32)
    w = np.ones(shape[-1], np.float32)
    model = single_node_model(
        "RmsNorm",
        [("x", TensorProto.FLOAT, list(shape)), ("w", TensorProto.FLOAT, [shape[-1]])],
        {"eps": 1e-6},
    )
    (got,) = run(model, [x, w])
    assert got.shape == shape
    model = single_node_model(
        "ScaledClamp",
        [("x", TensorProto.FLOAT, list(shape))],
        {"scale": 1.0, "min_val": 0.0, "max_val": 6.0},
    )
    (got,) = run(model, [x])
    assert got.shape == shape


def test_wrong_rank_weight_in_both_runtimes():
    with pytest.raises(RuntimeError, match=r"argument 'weight' must be 1-D .*got shape \[2, 4\]"):
        opbridge.rms_norm(torch.randn(3, 8), torch.ones(2, 4))
    model = single_node_model(
        "RmsNorm",
        [("x", TensorProto.FLOAT, [3, 8]), ("w", TensorProto.FLOAT, [2, 4])],
        {"eps": 1e-6},
    )
    with pytest.raises(Exception, match=r"argument 'weight' must be 1-D .*got shape \[2, 4\]"):
        session(model)


def test_wrong_input_dtype_in_onnx_runtime():
    model = single_node_model(
        "RmsNorm", [("x", TensorProto.FLOAT, [3, 8]), ("w", TensorProto.DOUBLE, [8])], {"eps": 1e-6}
    )
    with pytest.raises(
        Exception, match=r"argument 'weight' must have the dtype of x \(float32\), got float64"
    ):
        session(model)


def test_newer_domain_version_names_both_versions():
    model = single_node_model(
        "ScaledClamp",
        [("x", TensorProto.FLOAT, [2])],
        {"scale": 1.0, "min_val": 0.0, "max_val": 1.0},
        domain_version=opbridge.ONNX_DOMAIN_VERSION + 1,
    )
    with pytest.raises(
        RuntimeError, match=r"needs ONNX domain 'opbridge' version 2, .* supports version 1"
    ):
        opbridge.runtimes.onnxruntime.InferenceSession(model)
    # Plain ONNX Runtime never checks a custom domain's version: it resolves
    # every custom op from version 1 and runs the node. Only opbridge's own
    # entry points can refuse it (documented for C++ hosts).
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(opbridge.runtimes.onnxruntime.get_library_path())
    onnxruntime.InferenceSession(model.SerializeToString(), options)


def test_library_that_cannot_load_names_path_and_reason(tmp_path, monkeypatch):
    bogus = tmp_path / "libopbridge_ort.so"
    bogus.write_text("not a shared object")
    monkeypatch.setattr(opbridge.runtimes.onnxruntime, "get_library_path", lambda: str(bogus))
    with pytest.raises(RuntimeError, match=r"could not load .*libopbridge_ort\.so") as info:
        opbridge.runtimes.onnxruntime.InferenceSession(
            single_node_model("ScaledClamp", [("x", 1, [1])], {"scale": 1.0})
        )
    assert str(bogus) in str(info.value)


# ----------------------------------------------------------- concurrency


@pytest.mark.parametrize("name", ["demo", "llama_block", "vision"])
def test_one_session_from_eight_threads_matches_serial(name):
    # Between them the three models use every operator.
    from opbridge.demo.models import DEMO_MODELS

    model, (x,) = build_demo(batch=2, seq=16) if name == "demo" else DEMO_MODELS[name](0)
    proto = opbridge.export.export(model, (x,), route="custom")
    sess = opbridge.runtimes.onnxruntime.InferenceSession(proto)
    input_name = sess.get_inputs()[0].name
    rng = np.random.default_rng(0)
    if x.dtype == torch.uint8:
        inputs = [rng.integers(0, 256, x.shape, dtype=np.uint8) for _ in range(16)]
    else:
        inputs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(16)]
    serial = [sess.run(None, {input_name: v})[0] for v in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda v: sess.run(None, {input_name: v})[0], inputs * 2))
    for i, got in enumerate(parallel):
        np.testing.assert_array_equal(got, serial[i % len(inputs)])


def test_torch_ops_from_several_threads():
    xs = [torch.randn(64, 256) for _ in range(8)]
    w = torch.rand(256)
    serial = [opbridge.scaled_clamp(opbridge.rms_norm(x, w), 2.0) for x in xs]
    results = [None] * len(xs)
    barrier = threading.Barrier(len(xs))

    def work(i):
        barrier.wait()
        for _ in range(20):
            results[i] = opbridge.scaled_clamp(opbridge.rms_norm(xs[i], w), 2.0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, expected in zip(results, serial, strict=True):
        assert torch.equal(got, expected)


class _OpDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(4, 32, generator=g)
        return opbridge.rms_norm(x, torch.ones(32)), opbridge.scaled_clamp(x, 2.0)


def test_ops_inside_dataloader_workers():
    loader = torch.utils.data.DataLoader(_OpDataset(), batch_size=2, num_workers=2)
    got = list(loader)
    expected = list(torch.utils.data.DataLoader(_OpDataset(), batch_size=2, num_workers=0))
    assert len(got) == 4
    for (a1, b1), (a2, b2) in zip(got, expected, strict=True):
        assert torch.equal(a1, a2) and torch.equal(b1, b2)


# ------------------------------------------------------- OPBRIDGE_CHECK


def test_opbridge_check_reports_nan_in_torch():
    code = (
        "import torch, opbridge\n"
        "assert opbridge._library._C.runtime_checks_enabled()\n"
        "x = torch.ones(2, 4); x[1, 2] = float('nan')\n"
        "try:\n"
        "    opbridge.rms_norm(x, torch.ones(4))\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    result = python_code(code, OPBRIDGE_CHECK="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "rms_norm (ONNX opbridge::RmsNorm): argument 'x' contains NaN at flat index 6"
        in result.stdout
    )


def test_opbridge_check_reports_nan_in_a_backward_gradient():
    code = (
        "import torch, opbridge\n"
        "x = torch.ones(2, 4, requires_grad=True)\n"
        "y = opbridge.rms_norm(x, torch.ones(4))\n"
        "g = torch.ones(2, 4); g[0, 1] = float('nan')\n"
        "try:\n"
        "    y.backward(g)\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    result = python_code(code, OPBRIDGE_CHECK="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rms_norm (ONNX opbridge::RmsNorm): argument 'grad_y' contains NaN at flat index 1" in (
        result.stdout
    )
    # Without OPBRIDGE_CHECK the NaN just propagates.
    assert "contains NaN" not in python_code(code).stdout


def test_opbridge_check_reports_inf_in_onnx_runtime():
    code = (
        "import numpy as np, opbridge\n"
        "from onnx import TensorProto\n"
        "import sys; sys.path.insert(0, 'tests')\n"
        "from ort_helpers import run, single_node_model\n"
        "m = single_node_model('ScaledClamp', [('x', TensorProto.FLOAT, [3])],"
        " {'scale': 1.0, 'min_val': 0.0, 'max_val': 6.0})\n"
        "try:\n"
        "    run(m, [np.array([1, np.inf, 2], np.float32)])\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    result = python_code(code, OPBRIDGE_CHECK="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "argument 'x' contains Inf at flat index 1" in result.stdout
    assert "[node 'node0']" in result.stdout


def test_opbridge_check_is_off_by_default():
    assert not opbridge._library._C.runtime_checks_enabled()
    x = torch.tensor([[1.0, float("nan")]])
    assert torch.isnan(opbridge.rms_norm(x, torch.ones(2))).all()


def test_doctor_passes():
    result = subprocess.run(
        [sys.executable, "-m", "opbridge", "doctor"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for needle in (
        "torch",
        "onnxruntime",
        "compiler",
        "C++ ABI",
        "libopbridge_ort.so",
        "checks passed",
    ):
        assert needle in result.stdout


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "opbridge.scaled_clamp(torch.tensor([1.0, float('nan')], dtype=torch.float16), 2.0)",
            "argument 'x' contains NaN at flat index 1 of float16 shape [2]",
        ),
        (
            "opbridge.rms_norm(torch.tensor([[1.0, 2.0, float('inf')]], dtype=torch.bfloat16),"
            " torch.ones(3, dtype=torch.bfloat16))",
            "argument 'x' contains Inf at flat index 2 of bfloat16 shape [1, 3]",
        ),
        (
            "opbridge.normalize_image(torch.zeros(1, 2, 2, 3, dtype=torch.uint8),"
            " [0.5, float('nan'), 0.5], [0.25] * 3)",
            "argument 'mean' has NaN at index 1 of 3 values",
        ),
        (
            "opbridge.scaled_clamp(torch.ones(2), float('nan'))",
            "argument 'scale' is NaN",
        ),
    ],
)
def test_opbridge_check_covers_half_precision_and_float_attributes_in_torch(call, message):
    code = (
        "import torch, opbridge\n"
        "try:\n"
        f"    {call}\n"
        "    print('no error')\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    result = python_code(code, OPBRIDGE_CHECK="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert message in result.stdout, result.stdout
    assert "OPBRIDGE_CHECK" in result.stdout


def test_opbridge_check_covers_half_precision_and_float_attributes_in_onnx_runtime():
    code = (
        "import numpy as np, opbridge\n"
        "from onnx import TensorProto\n"
        "import sys; sys.path.insert(0, 'tests')\n"
        "from ort_helpers import run, single_node_model\n"
        "m = single_node_model('ScaledClamp', [('x', TensorProto.FLOAT16, [3])],"
        " {'scale': 1.0}, output_type=TensorProto.FLOAT16)\n"
        "try:\n"
        "    run(m, [np.array([1, 2, np.nan], np.float16)])\n"
        "except Exception as e:\n"
        "    print(e)\n"
        "m = single_node_model('NormalizeImage', [('image', TensorProto.UINT8, [1, 2, 2, 3])],"
        " {'mean': [0.5, 0.5, float('nan')], 'std': [0.5] * 3})\n"
        "try:\n"
        "    run(m, [np.zeros((1, 2, 2, 3), np.uint8)])\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    result = python_code(code, OPBRIDGE_CHECK="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "argument 'x' contains NaN at flat index 2 of float16 shape [3]" in result.stdout
    assert "argument 'mean' has NaN at index 2 of 3 values" in result.stdout
    assert result.stdout.count("[node 'node0']") == 2


# ------------------------------------------------------- library lifetime


def test_library_stays_loaded_when_its_last_session_closes():
    # ONNX Runtime unloads a custom-op library with the last session that
    # registered it; loaded again, it would build a new op table each time
    # and lose the old one. It stays loaded instead: one table per process.
    code = (
        "import gc, sys, numpy as np, opbridge\n"
        "from onnx import TensorProto\n"
        "sys.path.insert(0, 'tests')\n"
        "from ort_helpers import single_node_model\n"
        "m = single_node_model('ScaledClamp', [('x', TensorProto.FLOAT, [3])], {'scale': 2.0})\n"
        "def mapped():\n"
        "    return sorted({l.split()[0] for l in open('/proc/self/maps')"
        " if 'libopbridge_ort.so' in l})\n"
        "seen = []\n"
        "for _ in range(3):\n"
        "    s = opbridge.runtimes.onnxruntime.InferenceSession(m)\n"
        "    assert s.run(None, {'x': np.ones(3, np.float32)})[0].tolist() == [2, 2, 2]\n"
        "    del s\n"
        "    gc.collect()\n"
        "    seen.append(mapped())\n"
        "print(seen)\n"
        "assert seen[0] and seen[0] == seen[1] == seen[2], seen\n"
    )
    result = python_code(code)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
