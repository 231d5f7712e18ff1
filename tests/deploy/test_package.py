"""opbridge package --triton: the model repository matches the model."""

from __future__ import annotations

import filecmp
import re

import onnx
import pytest
import torch

import opbridge
from opbridge.demo.models import build_llama_block, build_vision


def _blocks(text: str, kind: str) -> list[dict]:
    """The entries of an ``input [...]`` / ``output [...]`` block of config.pbtxt."""
    body = re.search(rf"^{kind} \[\n(.*?)^\]", text, re.S | re.M).group(1)
    entries = []
    for entry in re.findall(r"\{(.*?)\}", body, re.S):
        dims = re.search(r"dims: \[ ([^\]]*)\]", entry).group(1).strip()
        entries.append(
            {
                "name": re.search(r'name: "([^"]+)"', entry).group(1),
                "data_type": re.search(r"data_type: (\w+)", entry).group(1),
                "dims": [int(d) for d in dims.split(",")] if dims else [],
            }
        )
    return entries


@pytest.mark.parametrize(
    ("build", "dtype"), [(build_llama_block, "TYPE_FP32"), (build_vision, "TYPE_UINT8")]
)
def test_triton_repository_matches_the_model(tmp_path, build, dtype):
    from opbridge.__main__ import main

    model, args = build()
    path = tmp_path / "m.onnx"
    proto = opbridge.export.export(
        model, args, path, route="custom", dynamic_batch=True, verbose=False
    )
    status = main(
        [
            "package",
            "--triton",
            str(tmp_path / "repo"),
            str(path),
            "--name",
            "net",
            "--threads",
            "2",
            "--mount",
            "/models",
        ]
    )
    assert status == 0
    folder = tmp_path / "repo" / "net"
    text = (folder / "config.pbtxt").read_text()
    assert 'name: "net"' in text and 'backend: "onnxruntime"' in text
    assert "max_batch_size: 8" in text  # the dynamic batch dimension is Triton's
    (library,) = re.findall(r'op_library_filename: "([^"]+)"', text)
    assert library == "/models/net/1/libopbridge_ort.so"
    assert filecmp.cmp(
        folder / "1" / "libopbridge_ort.so",
        opbridge.runtimes.onnxruntime.get_library_path(),
        shallow=False,
    )
    assert filecmp.cmp(folder / "1" / "model.onnx", path, shallow=False)
    assert 'key: "intra_op_thread_count"' in text and 'string_value: "2"' in text
    inputs, outputs = _blocks(text, "input"), _blocks(text, "output")
    assert [i["name"] for i in inputs] == [i.name for i in proto.graph.input]
    assert [o["name"] for o in outputs] == [o.name for o in proto.graph.output]
    assert inputs[0]["data_type"] == dtype
    assert inputs[0]["dims"] == list(args[0].shape[1:])
    with torch.no_grad():
        expected = model(*args)
    assert outputs[0]["dims"] == list(expected.shape[1:])
    # The packaged model runs with the packaged library.
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(str(folder / "1" / "libopbridge_ort.so"))
    session = onnxruntime.InferenceSession(str(folder / "1" / "model.onnx"), options)
    (got,) = session.run(None, {inputs[0]["name"]: args[0].numpy()})
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_standard_route_model_needs_no_library_and_static_batch_is_not_batched(tmp_path):
    model, args = build_llama_block()
    path = tmp_path / "m.onnx"
    opbridge.export.export(model, args, path, route="standard", verbose=False)
    from opbridge.deploy.triton import triton_repository

    folder = triton_repository(path, tmp_path / "repo")
    text = (folder / "config.pbtxt").read_text()
    assert "model_operations" not in text and "max_batch_size: 0" in text
    assert _blocks(text, "input")[0]["dims"] == list(args[0].shape)
    assert not list((folder / "1").glob("*.so"))
    onnx.checker.check_model(onnx.load(folder / "1" / "model.onnx"))


def _ldd(path) -> dict[str, str]:
    import subprocess

    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    return {
        line.split()[0]: line.split("=>")[1].split()[0] for line in out.splitlines() if "=>" in line
    }


def test_triton_repository_carries_the_shared_libraries_the_op_library_needs(tmp_path):
    from pathlib import Path

    from opbridge.deploy.triton import triton_repository
    from opbridge.sdk.package import BASE_LIBRARIES

    model, x = opbridge.nn.RMSNorm(8).eval(), torch.randn(2, 8)
    path = tmp_path / "m.onnx"
    opbridge.export.export(model, (x,), path, route="custom", dynamo=False, verbose=False)
    folder = triton_repository(path, tmp_path / "repo") / "1"
    source = opbridge.runtimes.onnxruntime.get_library_path()
    needed = {
        name: target
        for name, target in _ldd(source).items()
        if name.split(".so")[0] not in BASE_LIBRARIES
    }
    # This build links Highway's shared library (Debian's libhwy).
    assert "libhwy.so.1" in needed, needed
    packaged = sorted(p.name for p in folder.iterdir())
    assert packaged == sorted({"model.onnx", Path(source).name, *needed})
    for name, target in needed.items():
        assert filecmp.cmp(folder / name, target, shallow=False), name
    # The packaged library's RUNPATH ($ORIGIN) finds them in the folder.
    resolved = _ldd(folder / Path(source).name)
    for name in needed:
        assert Path(resolved[name]).resolve() == (folder / name).resolve(), resolved
