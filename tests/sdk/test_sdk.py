"""The SDK: a user's operator, defined outside opbridge, gets everything the
built-in operators get — generated registration, load_library, export by
both routes, ONNX Runtime sessions, verify, the JIT build and the scaffold."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import opbridge
from opbridge.__main__ import main
from opbridge.sdk import scaffold

from user_project import installed, passes_its_tests_and_verifies, runs_on_both_torch_libraries


def test_backward_schema_is_generated_from_the_spec():
    schema = str(torch.ops.opbridge.rms_norm_backward.default._schema)
    assert schema == (
        "opbridge::rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, float eps, "
        "bool[3] output_mask) -> (Tensor, Tensor, Tensor)"
    )
    assert opbridge.specs()["add_rms_norm"]["backward_schema"].startswith(
        "add_rms_norm_backward(Tensor grad_out, Tensor grad_residual_out, Tensor residual_out, "
        "Tensor weight, float eps, bool[3] output_mask)"
    )


def test_double_backward_is_a_clear_error_only_when_asked_for():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.ones(8, dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(opbridge.rms_norm(x, w).sum(), x, create_graph=True)
    reference = torch.autograd.grad(
        (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).sum(), x
    )[0]
    torch.testing.assert_close(grad_x.detach(), reference)
    with pytest.raises(RuntimeError, match=r"opbridge::rms_norm: double backward"):
        grad_x.sum().backward()


def test_no_grad_calls_build_no_graph():
    x = torch.randn(2, 8, requires_grad=True)
    with torch.no_grad():
        y = opbridge.scaled_clamp(x, 2.0)
    assert y.grad_fn is None and not y.requires_grad
    assert opbridge.scaled_clamp(x.detach(), 2.0).grad_fn is None


def test_gradients_only_for_inputs_that_need_them():
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    cos = torch.randn(4, 2, dtype=torch.float64)
    sin = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    q = x.view(1, 4, 2, 4)
    y = opbridge.rotary_embedding(q, cos, sin)
    gx, gs = torch.autograd.grad(y.sum(), (x, sin))
    assert gx.shape == x.shape and gs.shape == sin.shape


def test_load_library_refuses_what_is_not_a_library(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        opbridge.load_library(tmp_path / "missing.so")
    with pytest.raises(FileNotFoundError, match="expected one operator library module"):
        opbridge.load_library(tmp_path)
    with pytest.raises(ImportError, match="not an opbridge operator library"):
        opbridge.load_library(torch)


def test_builtin_library_is_loaded_and_loading_it_again_is_a_no_op():
    builtin = opbridge.libraries()[0]
    assert (builtin.torch_namespace, builtin.onnx_domain) == ("opbridge", "opbridge")
    assert opbridge.load_library(builtin.module) is builtin
    assert Path(opbridge.cmake_prefix_path(), "opbridge", "opbridgeConfig.cmake").is_file()


def test_scaffold_refuses_bad_names(tmp_path):
    with pytest.raises(ValueError, match="snake_case"):
        scaffold.files("SoftCap", "x_ops", "com.example.x")
    with pytest.raises(ValueError, match="belongs to opbridge"):
        scaffold.files("soft_cap", "opbridge", "com.example.x")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("")
    assert main(["new-op", str(tmp_path / "taken"), "--name", "soft_cap"]) == 2


def test_scaffold_readme_describes_the_op_by_its_spec_doc(tmp_path, monkeypatch):
    project = scaffold.files("soft_cap", "soft_cap_ops", "com.example.soft_cap_ops")
    doc = scaffold.spec_doc(project["csrc/soft_cap/spec.h"])
    assert doc.startswith("cap * tanh(x / cap)")
    assert f"The `soft_cap` operator: {doc}\n" in project["README.md"]
    # Another operator's spec template: the README follows its Doc, keeps no
    # other operator's math, and names its files.
    templates = tmp_path / "templates"
    templates.mkdir()
    for template in scaffold.TEMPLATES.iterdir():
        text = template.read_text()
        if template.name == "spec.h.in":
            text = re.sub(r'\.Doc\("[^"]*"\)', r'.Doc("x * \\"2\\", elementwise.")', text)
        (templates / template.name).write_text(text)
    monkeypatch.setattr(scaffold, "TEMPLATES", templates)
    readme = scaffold.files("twice", "twice_ops", "com.example.twice_ops")["README.md"]
    assert 'The `twice` operator: x * "2", elementwise.\n' in readme
    assert "tanh" not in readme and "(-cap, cap)" not in readme
    assert "`csrc/twice/spec.h`" in readme and "`tests/test_twice.py`" in readme


def test_jit_build_is_cached_by_content(tmp_path, monkeypatch):
    sources = tmp_path / "src"
    for relative, text in scaffold.files("soft_cap", "jit_ops", "com.example.jit").items():
        if relative.startswith("csrc/"):
            path = sources / Path(relative).relative_to("csrc")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    files = [sources / "soft_cap" / "spec.cpp", sources / "soft_cap" / "kernel.cpp"]
    cache = tmp_path / "cache"
    kwargs = {
        "torch_namespace": "jit_ops",
        "onnx_domain": "com.example.jit",
        "include_dirs": [sources],
        "adapters": ["torch", "ort", "openvino", "executorch"],
        "build_directory": cache,
    }
    library = opbridge.sdk.build.load("jit_ops", files, **kwargs)
    assert library.onnx_domain == "com.example.jit" and library.adapter_path("ort").is_file()
    x = torch.randn(3, 5, dtype=torch.float64)
    torch.testing.assert_close(torch.ops.jit_ops.soft_cap(x, 2.0), 2.0 * torch.tanh(x / 2.0))

    # The library takes part in export and sessions like opbridge's own.
    class Model(torch.nn.Module):
        def forward(self, x):
            return opbridge.rms_norm(torch.ops.jit_ops.soft_cap(x, 2.0), torch.ones(5))

    x32 = torch.randn(3, 5)
    proto = opbridge.export.export(Model(), (x32,), route="custom")
    assert {(n.domain, n.op_type) for n in proto.graph.node} == {
        ("com.example.jit", "SoftCap"),
        ("opbridge", "RmsNorm"),
    }
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata["opbridge.domain_version.com.example.jit"] == "1"
    session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
    (got,) = session.run(None, {session.get_inputs()[0].name: x32.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), Model()(x32), atol=1e-5, rtol=1e-5)
    # The same build has the library's OpenVINO extension, with no code of its own.
    assert library.adapter_path("openvino").is_file()
    compiled = opbridge.runtimes.openvino.compile_model(proto)
    got = compiled({compiled.inputs[0]: x32.numpy()})[compiled.outputs[0]]
    torch.testing.assert_close(torch.from_numpy(got), Model()(x32), atol=1e-5, rtol=1e-5)
    # And, named in its adapters, its ExecuTorch kernels: the op lowered to a
    # .pte program runs in ExecuTorch's runtime on the library's kernel.
    from opbridge.deploy import executorch

    assert executorch.load_kernels(library) == ["jit_ops::soft_cap.out"]
    executorch.load_kernels()  # opbridge's own, for its rms_norm
    pte = executorch.to_pte(Model(), (x32,), tmp_path / "model.pte")
    (got,) = executorch.run_pte(pte, (x32,))
    torch.testing.assert_close(got, Model()(x32), atol=1e-5, rtol=1e-5)
    newer = type(proto)()
    newer.CopyFrom(proto)
    for imp in newer.opset_import:
        if imp.domain == "com.example.jit":
            imp.version = 2
    with pytest.raises(RuntimeError, match=r"needs ONNX domain 'com.example.jit' version 2"):
        opbridge.runtimes.onnxruntime.InferenceSession(newer)
    unknown = type(proto)()
    unknown.CopyFrom(proto)
    for node in unknown.graph.node:
        if node.domain == "com.example.jit":
            node.domain = "com.example.missing"
    unknown.opset_import.add(domain="com.example.missing", version=1)
    with pytest.raises(RuntimeError, match=r"domain 'com.example.missing'.*load_library"):
        opbridge.runtimes.onnxruntime.InferenceSession(unknown)

    def no_build(*_args, **_kwargs):
        raise AssertionError("the cached build was rebuilt")

    monkeypatch.setattr(opbridge.sdk.build, "_run", no_build)
    assert opbridge.sdk.build.load("jit_ops", files, **kwargs) is library
    # A changed source is a new key, hence a new build.
    (sources / "soft_cap" / "kernel.cpp").write_text(files[1].read_text() + "\n// changed\n")
    with pytest.raises(AssertionError, match="rebuilt"):
        opbridge.sdk.build.load("jit_ops", files, **kwargs)


def test_jit_build_key_follows_the_installed_sdk(tmp_path, monkeypatch):
    # An opbridge rebuilt under the same version (an editable install) with a
    # changed toolkit header must not reuse libraries built on the old one.
    from opbridge.sdk import build

    source = tmp_path / "kernel.cpp"
    source.write_text("// kernel\n")
    before = build._key("ops", [source], [])
    assert build._key("ops", [source], []) == before
    monkeypatch.setattr(build, "_sdk_digest", lambda: "another sdk")
    assert build._key("ops", [source], []) != before


# A second operator for the scaffold's project (tests/sdk/projects/pairwise_dot):
# pairwise_dot, [B, F, D] -> [B, F * (F - 1) / 2], an output size its shape
# rule computes from the input's.
SECOND_OP = Path(__file__).parent / "projects" / "pairwise_dot"


def add_second_operator(project: Path, package: str) -> None:
    """pairwise_dot added to the project as the guide adds a second operator:
    its C++ folder, its card, its import in the package and its tests (the
    first op's generated tests, for its card)."""

    def ours(text: str) -> str:
        return text.replace("pairwise_dot_ops", package)

    (project / "csrc" / "pairwise_dot").mkdir()
    for name in ("spec.h", "spec.cpp", "kernel.cpp"):
        (project / "csrc" / "pairwise_dot" / name).write_text(ours((SECOND_OP / name).read_text()))
    card = SECOND_OP / "pairwise_dot.py"
    (project / "python" / package / "pairwise_dot.py").write_text(ours(card.read_text()))
    init = project / "python" / package / "__init__.py"
    init.write_text(
        init.read_text() + f"from {package}.pairwise_dot import pairwise_dot  # noqa: E402\n"
    )
    tests = (project / "tests" / "test_soft_cap.py").read_text()
    tests = tests.replace(f"from {package} import CARD", f"from {package}.pairwise_dot import CARD")
    # The op has no attribute, so no attribute value for its kernel to refuse.
    tests, n = re.subn(r"INVALID_ATTRS = \{.*?\}\n", "INVALID_ATTRS = {}\n", tests, flags=re.S)
    assert n == 1
    (project / "tests" / "test_pairwise_dot.py").write_text(tests)


def symbolic_sizes_hold(package: str) -> None:
    """pairwise_dot's computed size stays symbolic under both PyTorch
    libraries: torch.export with a Dim, torch.compile with dynamic shapes,
    both ONNX exporters, ONNX Runtime (tests/sdk/projects/pairwise_dot)."""
    for kind in ("default", "stable"):
        result = subprocess.run(
            [sys.executable, str(SECOND_OP / "dynamic_checks.py"), package, kind],
            capture_output=True,
            text=True,
            env={**os.environ, "OPBRIDGE_TORCH_ADAPTER": kind},
            cwd=tempfile.gettempdir(),
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        assert f"under the {kind} PyTorch library" in result.stdout, result.stdout


def test_scaffold_project_builds_passes_its_tests_and_verifies(tmp_path):
    project = tmp_path / "soft_cap_project"
    assert main(["new-op", str(project), "--name", "soft_cap"]) == 0
    add_second_operator(project, "soft_cap_ops")
    with installed(project, "soft_cap_ops"):
        passes_its_tests_and_verifies(project, project / "example.py")
        runs_on_both_torch_libraries("soft_cap_ops")
        symbolic_sizes_hold("soft_cap_ops")
