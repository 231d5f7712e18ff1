"""The library from a C++ host program (examples/cpp), built from a fresh
build folder with only the documented CMake (docs/guides/cpp-host.md):
find_package(opbridge) and the opbridge::onnxruntime target. The host feeds
every input of a model, of the element type the model declares, and writes
every output (`--input NAME=FILE:DIMxDIM`, `--output-dir DIR`); the older
form `INPUT.bin OUTPUT.bin DIM...` still runs a model of one input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import opbridge
from opbridge.demo import build_demo

from paths import ROOT

EXAMPLE = ROOT / "examples" / "cpp"


def _run(*command, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    """examples/cpp built as the guide says, in a folder of its own."""
    build = tmp_path_factory.mktemp("cpp-host")
    ninja = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    _run(
        "cmake",
        "-S",
        EXAMPLE,
        "-B",
        build,
        *generator,
        f"-DCMAKE_PREFIX_PATH={opbridge.cmake_prefix_path()}",
    )
    _run("cmake", "--build", build)
    return build / "run_model"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo model exported by the custom route, its input (in.bin) and
    PyTorch's output."""
    folder = tmp_path_factory.mktemp("cpp-host-model")
    model, (x,) = build_demo(batch=2, seq=8)
    path = folder / "demo.onnx"
    opbridge.export.export(model, (x,), path, route="custom")
    x.numpy().astype(np.float32).tofile(folder / "in.bin")
    with torch.no_grad():
        expected = model(x).numpy()
    return path, x.shape, expected


def _run_model(host: Path, model: Path, shape, check: bool = True):
    out = model.with_suffix(".out.bin")
    result = _run(
        host,
        model,
        opbridge.runtimes.onnxruntime.get_library_path(),
        model.parent / "in.bin",
        out,
        *shape,
        check=check,
    )
    return result, out


def test_host_links_the_wheels_runtime_through_the_build_tree(host):
    dynamic = _run("readelf", "-d", host).stdout
    assert "[libonnxruntime.so.1]" in dynamic
    runpath = dynamic.split("RUNPATH")[1].split("[")[1].split("]")[0]
    link = Path(runpath) / "libonnxruntime.so.1"
    assert link.is_symlink(), dynamic
    assert link.resolve().parent.name == "capi"  # site-packages/onnxruntime/capi


def test_host_runs_custom_route_model(host, demo):
    path, shape, expected = demo
    result, out = _run_model(host, path, shape)
    assert result.stdout.startswith(f"ok {expected.size} values"), result.stdout
    got = np.fromfile(out, dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", ["opset_import", "metadata"])
def test_host_refuses_a_model_of_a_newer_domain_version(host, demo, where):
    path, shape, _ = demo
    model = onnx.load(path)
    newer = opbridge.ONNX_DOMAIN_VERSION + 1
    if where == "opset_import":
        (opset,) = [o for o in model.opset_import if o.domain == opbridge.ONNX_DOMAIN]
        opset.version = newer
    else:
        key = f"opbridge.domain_version.{opbridge.ONNX_DOMAIN}"
        (prop,) = [p for p in model.metadata_props if p.key == key]
        prop.value = str(newer)
    newer_path = path.with_name(f"newer_{where}.onnx")
    onnx.save(model, newer_path)
    result, out = _run_model(host, newer_path, shape, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"needs ONNX domain '{opbridge.ONNX_DOMAIN}' version {newer}, but "
        f"{opbridge.runtimes.onnxruntime.get_library_path()} implements versions 1 to "
        f"{opbridge.ONNX_DOMAIN_VERSION}"
    ) in result.stderr
    assert not out.exists()


def test_host_refuses_a_truncated_model(host, demo):
    path, shape, _ = demo
    truncated = path.with_name("truncated.onnx")
    truncated.write_bytes(path.read_bytes()[:200])
    result, _ = _run_model(host, truncated, shape, check=False)
    assert result.returncode == 1
    assert "is not a readable ONNX model" in result.stderr


def test_library_info_names_the_library_its_domain_and_operators(host):
    info = opbridge.runtimes.onnxruntime.library_info()
    assert info["name"] == "opbridge" and info["version"] == opbridge.VERSION
    assert info["domains"] == [
        {"domain": opbridge.ONNX_DOMAIN, "version": opbridge.ONNX_DOMAIN_VERSION}
    ]
    specs = opbridge.specs()
    assert sorted(op["name"] for op in info["operators"]) == sorted(specs)
    for op in info["operators"]:
        assert op["op_type"] == specs[op["name"]]["onnx_type"]
        assert op["domain"] == opbridge.ONNX_DOMAIN
        assert "CPUExecutionProvider" in op["execution_providers"]
    # What a C++ host reads is the same text.
    printed = _run(host, "--info", opbridge.runtimes.onnxruntime.get_library_path()).stdout
    assert json.loads(printed) == info


def _library() -> str:
    return opbridge.runtimes.onnxruntime.get_library_path()


def _ort_reference(path: Path, feeds: dict) -> dict:
    """What ONNX Runtime's Python InferenceSession computes, with the same
    library registered the way the host registers it."""
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(_library())
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _shape(array: np.ndarray) -> str:
    return "x".join(map(str, array.shape))


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def lookup(tmp_path_factory):
    """A model of two inputs, int64 token ids and a float32 tensor:
    Gather of a float table by the ids, plus x, through opbridge::RmsNorm;
    both the embedding and the norm are outputs. With feeds for it."""
    folder = tmp_path_factory.mktemp("cpp-host-lookup")
    rng = np.random.default_rng(0)
    vocab, dim = 11, 16
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    weight = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Add", ["emb", "x"], ["h"]),
        helper.make_node("RmsNorm", ["h", "w"], ["y"], domain=opbridge.ONNX_DOMAIN, eps=1e-5),
    ]
    graph = helper.make_graph(
        nodes,
        "lookup",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", dim]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", dim]),
            helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["batch", "seq", dim]),
        ],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(weight, "w"),
        ],
    )
    model = helper.make_model(
        graph,
        ir_version=10,
        opset_imports=[
            helper.make_opsetid("", 18),
            helper.make_opsetid(opbridge.ONNX_DOMAIN, opbridge.ONNX_DOMAIN_VERSION),
        ],
    )
    path = _save(model, folder / "lookup.onnx")
    feeds = {
        "ids": rng.integers(0, vocab, size=(2, 5), dtype=np.int64),
        "x": rng.standard_normal((2, 5, dim)).astype(np.float32),
    }
    for name, array in feeds.items():
        array.tofile(folder / f"{name}.bin")
    return path, feeds


def _input_args(folder: Path, feeds: dict) -> list[str]:
    return [
        arg
        for name, array in feeds.items()
        for arg in ("--input", f"{name}={folder / (name + '.bin')}:{_shape(array)}")
    ]


def test_host_feeds_int64_and_float_inputs_and_writes_every_output(host, lookup, tmp_path):
    path, feeds = lookup
    out = tmp_path / "out"
    result = _run(host, path, _library(), *_input_args(path.parent, feeds), "--output-dir", out)
    expected = _ort_reference(path, feeds)
    assert sorted(p.name for p in out.iterdir()) == ["emb.bin", "y.bin"]
    for name, want in expected.items():
        assert f"wrote {name} (float32, {_shape(want)}, {want.size} values) to " in result.stdout
        got = np.fromfile(out / f"{name}.bin", dtype=want.dtype).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The embedding is the table's rows, exactly.
    np.testing.assert_array_equal(
        np.fromfile(out / "emb.bin", dtype=np.float32).reshape(expected["emb"].shape),
        expected["emb"],
    )


def test_host_writes_an_output_to_the_file_named_for_it(host, lookup, tmp_path):
    path, feeds = lookup
    # Inputs in another order than the model's; one output to a file of its
    # own, the other to the folder.
    args = _input_args(path.parent, dict(reversed(feeds.items())))
    _run(
        host,
        path,
        _library(),
        *args,
        "--output",
        f"y={tmp_path / 'norm.bin'}",
        "--output-dir",
        tmp_path / "rest",
    )
    expected = _ort_reference(path, feeds)
    got = np.fromfile(tmp_path / "norm.bin", dtype=np.float32).reshape(expected["y"].shape)
    np.testing.assert_allclose(got, expected["y"], rtol=1e-6, atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "rest").iterdir()) == ["emb.bin"]


def test_host_reads_and_writes_each_element_type_as_raw_bytes(host, tmp_path):
    """float16, bfloat16 (raw 16 bits), float64, int32, uint8 and bool
    inputs; outputs of those types, raw."""
    rng = np.random.default_rng(1)
    half = rng.standard_normal((2, 3)).astype(np.float16)
    wide = rng.standard_normal(4).astype(np.float32)
    bf16 = (wide.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16's bits
    double = rng.standard_normal(4)
    mask = np.array([True, False, False, True])
    small = np.array([1, -7, 300], dtype=np.int32)
    raw = np.array([0, 1, 254, 255, 7], dtype=np.uint8)
    T = TensorProto
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["half"], ["half_out"]),
            helper.make_node("Cast", ["bf16"], ["bf16_as_float"], to=T.FLOAT),
            helper.make_node("Neg", ["double"], ["minus"]),
            helper.make_node("Where", ["mask", "double", "minus"], ["chosen"]),
            helper.make_node("Not", ["mask"], ["not_mask"]),
            helper.make_node("Mul", ["small", "small"], ["squares"]),
            helper.make_node("Identity", ["raw"], ["raw_out"]),
            helper.make_node("Cast", ["half"], ["half_as_double"], to=T.DOUBLE),
        ],
        "types",
        [
            helper.make_tensor_value_info("half", T.FLOAT16, [2, 3]),
            helper.make_tensor_value_info("bf16", T.BFLOAT16, [4]),
            helper.make_tensor_value_info("double", T.DOUBLE, [4]),
            helper.make_tensor_value_info("mask", T.BOOL, [4]),
            helper.make_tensor_value_info("small", T.INT32, [3]),
            helper.make_tensor_value_info("raw", T.UINT8, [None]),
        ],
        [
            helper.make_tensor_value_info("half_out", T.FLOAT16, [2, 3]),
            helper.make_tensor_value_info("bf16_as_float", T.FLOAT, [4]),
            helper.make_tensor_value_info("chosen", T.DOUBLE, [4]),
            helper.make_tensor_value_info("not_mask", T.BOOL, [4]),
            helper.make_tensor_value_info("squares", T.INT32, [3]),
            helper.make_tensor_value_info("raw_out", T.UINT8, [None]),
            helper.make_tensor_value_info("half_as_double", T.DOUBLE, [2, 3]),
        ],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    path = _save(model, tmp_path / "types.onnx")
    feeds = {"half": half, "bf16": bf16, "double": double, "mask": mask, "small": small, "raw": raw}
    for name, array in feeds.items():
        array.tofile(tmp_path / f"{name}.bin")
    _run(host, path, _library(), *_input_args(tmp_path, feeds), "--output-dir", tmp_path / "out")
    expected = {
        "half_out": half,
        "bf16_as_float": (bf16.astype(np.uint32) << 16).view(np.float32),
        "chosen": np.where(mask, double, -double),
        "not_mask": ~mask,
        "squares": small * small,
        "raw_out": raw,
        "half_as_double": half.astype(np.float64),
    }
    for name, want in expected.items():
        got = np.fromfile(tmp_path / "out" / f"{name}.bin", dtype=want.dtype)
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=name)
    # Everything but the bfloat16 input (numpy has no such type) as ONNX
    # Runtime's Python API computes it.
    ort_feeds = {k: v for k, v in feeds.items() if k != "bf16"}
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [n for n in expected if n != "bf16_as_float"]
    ort_feeds["bf16"] = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bf16, T.BFLOAT16)
    for name, want in zip(names, session.run(names, ort_feeds), strict=True):
        np.testing.assert_array_equal(expected[name], want, err_msg=name)


def _fails(result: subprocess.CompletedProcess, *messages: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    for message in messages:
        assert message in result.stderr, result.stderr
    assert "Segmentation" not in result.stderr and "terminate" not in result.stderr


def test_host_refuses_an_input_file_of_the_wrong_size(host, lookup, tmp_path):
    path, feeds = lookup
    short = tmp_path / "ids.bin"
    feeds["ids"].reshape(-1)[:-1].tofile(short)  # one int64 short
    args = _input_args(path.parent, feeds)
    args[1] = f"ids={short}:2x5"
    result = _run(host, path, _library(), *args, "--output-dir", tmp_path / "out", check=False)
    _fails(
        result,
        f"input 'ids' (int64, shape 2x5) needs 80 bytes (10 values of 8 bytes), "
        f"but {short} has 72 bytes",
    )
    assert not (tmp_path / "out").exists()


def test_host_refuses_a_float_file_read_as_int64(host, lookup, tmp_path):
    # The ids fed as float32 (what the host took before it read the
    # declared type): half the bytes an int64 input of that shape needs.
    path, feeds = lookup
    wrong = tmp_path / "ids.bin"
    feeds["ids"].astype(np.float32).tofile(wrong)
    args = _input_args(path.parent, feeds)
    args[1] = f"ids={wrong}:2x5"
    result = _run(host, path, _library(), *args, "--output-dir", tmp_path, check=False)
    _fails(result, "input 'ids' (int64, shape 2x5) needs 80 bytes", "has 40 bytes")


@pytest.mark.parametrize(
    ("change", "messages"),
    [
        (
            lambda args: [*args, "--input", "positions=p.bin:2x5"],
            [
                "the model has no input 'positions'; its inputs are "
                "ids (int64, batchxseq), x (float32, batchxseqx16)"
            ],
        ),
        (
            lambda args: args[:2],
            [
                "missing input 'x': the model declares x (float32, batchxseqx16); "
                "give it with --input x=FILE:DIMxDIM"
            ],
        ),
        (
            lambda args: [args[0], args[1], args[2], args[3].replace(":2x5x16", ":2x5x8")],
            ["input 'x' is declared with shape batchxseqx16, but the shape given is 2x5x8"],
        ),
        (
            lambda args: [*args, "--output", "logits=l.bin"],
            ["the model has no output 'logits'; its outputs are y (float32, batchxseqx16)"],
        ),
    ],
    ids=["unknown input", "missing input", "declared shape", "unknown output"],
)
def test_host_names_the_input_that_does_not_fit(host, lookup, tmp_path, change, messages):
    path, feeds = lookup
    args = change(_input_args(path.parent, feeds))
    result = _run(host, path, _library(), *args, "--output-dir", tmp_path / "o", check=False)
    _fails(result, *messages)
    assert not (tmp_path / "o").exists()


def test_host_needs_somewhere_for_every_output(host, lookup, tmp_path):
    path, feeds = lookup
    args = _input_args(path.parent, feeds)
    result = _run(host, path, _library(), *args, "--output", f"y={tmp_path / 'y.bin'}", check=False)
    _fails(
        result,
        "output 'emb' has nowhere to go: give --output-dir DIR (it is written to DIR/emb.bin) "
        "or --output emb=FILE",
    )
    assert not (tmp_path / "y.bin").exists()


def test_host_refuses_an_element_type_it_does_not_read(host, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["words"], ["same"])],
        "strings",
        [helper.make_tensor_value_info("words", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, [2])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    path = _save(model, tmp_path / "strings.onnx")
    (tmp_path / "words.bin").write_bytes(b"ab")
    result = _run(
        host,
        path,
        _library(),
        "--input",
        f"words={tmp_path / 'words.bin'}:2",
        "--output-dir",
        tmp_path,
        check=False,
    )
    _fails(
        result,
        "input 'words' has element type string, which run_model does not read; "
        "it reads raw bytes of float32, float64, float16, bfloat16,",
    )


def test_host_refuses_a_bool_byte_other_than_0_or_1(host, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Not", ["mask"], ["flipped"])],
        "bools",
        [helper.make_tensor_value_info("mask", TensorProto.BOOL, [3])],
        [helper.make_tensor_value_info("flipped", TensorProto.BOOL, [3])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    path = _save(model, tmp_path / "bools.onnx")
    (tmp_path / "mask.bin").write_bytes(bytes([1, 0, 2]))
    result = _run(
        host,
        path,
        _library(),
        "--input",
        f"mask={tmp_path / 'mask.bin'}:3",
        "--output-dir",
        tmp_path / "o",
        check=False,
    )
    _fails(result, "input 'mask' is bool: every byte of", "must be 0 or 1, but byte 2 is 2")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "x=x.bin"], "--input 'x=x.bin': expected NAME=FILE:DIMxDIM..."),
        (["--input", "x=x.bin:2x-3"], "'2x-3' is not a shape"),
        (["--input", "x.bin:2x3"], "--input 'x.bin:2x3': expected NAME=FILE:DIMxDIM..."),
        (["--inputs", "x=x.bin:2"], "unknown option '--inputs'"),
        (["--output-dir"], "--output-dir needs a value"),
    ],
)
def test_host_explains_a_malformed_command_line(host, demo, args, message):
    path, _, _ = demo
    result = _run(host, path, _library(), *args, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "usage:" in result.stderr


def test_host_older_form_refuses_a_model_of_two_inputs(host, lookup, tmp_path):
    path, _ = lookup
    result = _run(
        host, path, _library(), path.parent / "x.bin", tmp_path / "y.bin", 2, 5, 16, check=False
    )
    _fails(
        result,
        f"{path} has 2 inputs (ids (int64, batchxseq), x (float32, batchxseqx16)), "
        "but the form INPUT.bin OUTPUT.bin DIM... feeds one",
    )
    assert not (tmp_path / "y.bin").exists()


def test_host_runs_the_custom_route_model_with_named_input(host, demo, tmp_path):
    path, shape, expected = demo
    (name,) = [i.name for i in onnx.load(path).graph.input]
    (output,) = [o.name for o in onnx.load(path).graph.output]
    result = _run(
        host,
        path,
        _library(),
        "--input",
        f"{name}={path.parent / 'in.bin'}:{'x'.join(map(str, shape))}",
        "--output-dir",
        tmp_path,
    )
    assert result.stdout.startswith(f"wrote {output} (float32, "), result.stdout
    got = np.fromfile(next(tmp_path.glob("*.bin")), dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
