"""The library from a C++ host program (examples/cpp), built from a fresh
build folder with only the documented CMake (docs/guides/cpp-host.md):
find_package(opbridge) and the opbridge::onnxruntime target."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

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
