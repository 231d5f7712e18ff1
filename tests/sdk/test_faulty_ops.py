"""A user's library that is wrong: shape rules that disagree with their
kernels (output guards: OPBRIDGE_CHECK=1 and opbridge.sdk.testing), and a library
whose torch namespace or operators are taken (refused before registering).

Every case runs in a process of its own, so that a crash (heap corruption,
an abort) fails its test instead of the test run. The operators are those of
faulty_ops/ (one JIT build, cached by content under build/test-jit)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import faulty_library
import pytest

# Allocates and frees after the faulty calls: heap corruption shows here.
_CHURN = """
for _ in range(100):
    kept = [torch.randn(64, 64) for _ in range(20)]
print("churned")
"""


def _python(code: str, churn: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs ``code`` (then _CHURN) in a Python process of its own."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + (_CHURN if churn else "")],
        capture_output=True,
        text=True,
        env=os.environ if env is None else env,
        check=False,
        timeout=600,
    )


_CHECK = {**os.environ, "OPBRIDGE_CHECK": "1"}


def _clean(result: subprocess.CompletedProcess) -> str:
    """The process's stdout, after checking that it exited cleanly."""
    assert result.returncode == 0, (
        f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def faulty() -> Path:
    """The faulty_ops extension module (built in a process of its own)."""
    return faulty_library.build()


def test_a_shape_rule_smaller_than_the_kernel_writes_is_an_error(faulty):
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            opbridge.load_library({str(faulty)!r})
            from onnx import TensorProto, helper
            x = torch.randn(64, 64)
            node = helper.make_node("ShortShape", ["x"], ["y"], domain="com.example.faulty")
            graph = helper.make_graph(
                [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
            model = helper.make_model(graph, opset_imports=[
                helper.make_opsetid("", 18), helper.make_opsetid("com.example.faulty", 1)])
            model.ir_version = 10
            session = opbridge.runtimes.onnxruntime.InferenceSession(model)
            compiled = opbridge.runtimes.openvino.compile_model(model)
            from opbridge.deploy import executorch

            class Short(torch.nn.Module):
                def forward(self, x):
                    return torch.ops.faulty_ops.short_shape(x)

            executorch.load_kernels("faulty_ops")
            pte = executorch.to_pte(Short(), (x,), {str(faulty.parent)!r} + "/short_shape.pte")
            for name, call in [
                ("eager", lambda: torch.ops.faulty_ops.short_shape(x)),
                ("out", lambda: torch.ops.faulty_ops.short_shape.out(x, out=torch.empty(0))),
                ("ort", lambda: session.run(None, {{"x": x.numpy()}})),
                ("openvino", lambda: compiled({{"x": x.numpy()}})),
                ("executorch", lambda: executorch.run_pte(pte, (x,))),
            ]:
                try:
                    call()
                except Exception as error:  # RuntimeError; ONNX Runtime's Fail
                    print(name, "|", " ".join(str(error).split()))  # OpenVINO: several lines
                else:
                    print(name, "| no error")
            """,
            churn=True,
            env=_CHECK,
        )
    )
    assert "churned" in out
    wrote = (
        "the kernel wrote past the end of output 'y': its shape rule gives float32 [64, 1] "
        "(256 bytes), the kernel wrote 16384 bytes (16128 bytes past its end), as many as "
        "input 'x' (float32 [64, 64])"
    )
    assert f"eager | faulty_ops::short_shape: {wrote}" in out, out
    assert f"out | faulty_ops::short_shape.out: {wrote}" in out, out
    ort = "faulty_ops::short_shape (ONNX com.example.faulty::ShortShape): " + wrote
    assert ort in out.split("ort |")[1].splitlines()[0], out
    assert ort in out.split("openvino |")[1].splitlines()[0], out
    assert f"faulty_ops::short_shape: {wrote}" in out.split("executorch |")[1].splitlines()[0], out


def test_b_a_shape_rule_with_the_wrong_dtype_is_an_error(faulty):
    # float64 x: the kernel writes 8 bytes per element into a float32 y (the
    # heap corruption behind the crash after the dtype mismatch); float32 x
    # into a float64 y: half of y left unwritten.
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            opbridge.load_library({str(faulty)!r})
            for name, dtype in [("narrow_dtype", torch.float64), ("wide_dtype", torch.float32)]:
                try:
                    getattr(torch.ops.faulty_ops, name)(torch.randn(8, 4, dtype=dtype))
                except RuntimeError as error:
                    print(name, "|", str(error).splitlines()[0])
                else:
                    print(name, "| no error")
            """,
            churn=True,
            env=_CHECK,
        )
    )
    assert "churned" in out
    assert (
        "narrow_dtype | faulty_ops::narrow_dtype: the kernel wrote past the end of output 'y': "
        "its shape rule gives float32 [8, 4] (128 bytes), the kernel wrote 256 bytes (128 bytes "
        "past its end), as many as input 'x' (float64 [8, 4])"
    ) in out, out
    assert (
        "wide_dtype | faulty_ops::wide_dtype: the kernel left the end of output 'y' unwritten: "
        "its shape rule gives float64 [8, 4] (256 bytes), the kernel wrote only the first "
        "128 bytes, as many as input 'x' (float32 [8, 4])"
    ) in out, out


def test_a_backward_shape_rule_smaller_than_its_kernel_writes_is_an_error(faulty):
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            opbridge.load_library({str(faulty)!r})
            x = torch.randn(64, 64, requires_grad=True)
            try:
                torch.ops.faulty_ops.short_gradient(x).sum().backward()
            except RuntimeError as error:
                print("backward |", str(error).splitlines()[0])
            """,
            churn=True,
            env=_CHECK,
        )
    )
    assert "churned" in out
    assert (
        "backward | faulty_ops::short_gradient_backward: the kernel wrote past the end of output "
        "'grad_x': its shape rule gives float32 [1] (4 bytes), the kernel wrote 16384 bytes "
        "(16380 bytes past its end), as many as input 'grad_y' (float32 [64, 64]) or input 'x'"
    ) in out, out


_DEFAULT = {k: v for k, v in os.environ.items() if k != "OPBRIDGE_CHECK"}


def test_a_backward_kernel_that_never_writes_a_gradient_is_an_error(faulty):
    # Without OPBRIDGE_CHECK: the gate's gradient would be whatever its memory held.
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            opbridge.load_library({str(faulty)!r})
            x = torch.randn(8, 4, requires_grad=True)
            gate = torch.randn(8, 4, requires_grad=True)
            try:
                torch.ops.faulty_ops.forgotten_gradient(x, gate).sum().backward()
            except RuntimeError as error:
                print("backward |", str(error).splitlines()[0])
            """,
            env=_DEFAULT,
        )
    )
    assert (
        "backward | faulty_ops::forgotten_gradient (ONNX com.example.faulty::ForgottenGradient): "
        "the kernel returned without writing output 'grad_gate'"
    ) in out, out


def test_a_toolkit_kernel_refuses_a_shape_rule_it_disagrees_with_in_every_host(faulty):
    # OPBRIDGE_CHECK unset: the toolkit's launchers check every tensor before
    # the kernel runs (the map: its output of another size; the row kernel:
    # its per-row output 0-d, or of another dtype). Each call is an error,
    # the output buffers untouched, and the process lives on.
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            opbridge.load_library({str(faulty)!r})
            from onnx import TensorProto, helper
            from opbridge.deploy import executorch
            x = torch.randn(64, 32)

            def model_of(op_type, outputs):
                node = helper.make_node(op_type, ["x"], outputs, domain="com.example.faulty")
                graph = helper.make_graph(
                    [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
                    [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
                model = helper.make_model(graph, opset_imports=[
                    helper.make_opsetid("", 18), helper.make_opsetid("com.example.faulty", 1)])
                model.ir_version = 10
                return model

            class Call(torch.nn.Module):
                def __init__(self, op):
                    super().__init__()
                    self.op = op
                def forward(self, x):
                    return self.op(x)

            executorch.load_kernels("faulty_ops")
            calls = []
            for name, op_type, outputs in [("short_map", "ShortMap", ["y"]),
                                           ("scalar_row_stat", "ScalarRowStat", ["y", "mean"])]:
                op = getattr(torch.ops.faulty_ops, name)
                model = model_of(op_type, outputs)
                session = opbridge.runtimes.onnxruntime.InferenceSession(model)
                compiled = opbridge.runtimes.openvino.compile_model(model)
                pte = executorch.to_pte(Call(op), (x,), {str(faulty.parent)!r} + f"/{{name}}.pte")
                calls += [
                    (name + " eager", lambda op=op: op(x)),
                    (name + " ort", lambda s=session: s.run(None, {{"x": x.numpy()}})),
                    (name + " openvino", lambda c=compiled: c({{"x": x.numpy()}})),
                    (name + " executorch", lambda p=pte: executorch.run_pte(p, (x,))),
                ]
            y = torch.full((64, 1), 7.0)
            calls.append(("short_map out", lambda: torch.ops.faulty_ops.short_map.out(x, out=y)))
            calls.append(("wide_row_stat eager", lambda: torch.ops.faulty_ops.wide_row_stat(x)))
            g = x.clone().requires_grad_()
            calls.append(("short_map_gradient backward",
                          lambda: torch.ops.faulty_ops.short_map_gradient(g).sum().backward()))
            for name, call in calls:
                try:
                    call()
                except Exception as error:  # RuntimeError; ONNX Runtime's Fail
                    print(name, "|", " ".join(str(error).split()))
                else:
                    print(name, "| no error")
            print("out untouched:", bool((y == 7.0).all()))
            """,
            churn=True,
            env=_DEFAULT,
        )
    )
    assert "churned" in out and "out untouched: True" in out, out
    lines = dict(line.split(" | ", 1) for line in out.splitlines() if " | " in line)
    short = (
        "output 'y' is float32 [64, 1], 64 elements by the shape rule, but the kernel writes "
        "2048 float32 values (one per element of the largest input); the shape rule and the "
        "kernel disagree"
    )
    scalar = (
        "output 'mean' is float32 [], 1 element by the shape rule, but the kernel writes 64 "
        "float32 values (one per row)"
    )
    for host in ("eager", "ort", "openvino", "executorch"):
        assert short in lines[f"short_map {host}"], (host, out)
        assert "faulty_ops::short_map" in lines[f"short_map {host}"], (host, out)
        assert scalar in lines[f"scalar_row_stat {host}"], (host, out)
    assert short in lines["short_map out"], out
    assert (
        "faulty_ops::wide_row_stat (ONNX com.example.faulty::WideRowStat): output 'mean' is "
        "float64 [64], 64 elements by the shape rule, but the kernel writes 64 float32 values "
        "(one per row)"
    ) in lines["wide_row_stat eager"], out
    assert (
        "faulty_ops::short_map_gradient (ONNX com.example.faulty::ShortMapGradient): output "
        "'grad_x' is float32 [1], 1 element by the shape rule, but the kernel writes 2048 "
        "float32 values"
    ) in lines["short_map_gradient backward"], out


def test_opbridge_testing_checks_catch_a_wrong_shape_rule_without_opbridge_check(faulty):
    env = {k: v for k, v in os.environ.items() if k != "OPBRIDGE_CHECK"}
    code = f"""
        import torch, opbridge
        import opbridge.sdk.testing as checks
        from opbridge.ops import Card, Sample

        library = opbridge.load_library({str(faulty)!r})

        def card(name):
            def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
                x = torch.randn(16, 16, dtype=dtype, requires_grad=requires_grad)
                yield Sample((x,), label="16x16")

            return Card(name=name, namespace="faulty_ops", call=getattr(torch.ops.faulty_ops, name),
                        standard=None, reference=lambda x: x, samples=samples, bench_inputs=None)

        cases = [
            ("short_shape", checks.check_reference, {{}}),
            ("narrow_dtype", checks.check_reference, {{"dtypes": (torch.float64,)}}),
            ("wide_dtype", checks.check_reference, {{"dtypes": (torch.float32,)}}),
            ("short_gradient", checks.check_gradcheck, {{}}),
        ]
        for name, check, kwargs in cases:
            try:
                check(card(name), **kwargs)
            except RuntimeError as error:
                print(name, "|", str(error).splitlines()[0])
            else:
                print(name, "| passed")
        # The guards are on only for the checks.
        print("guards after the checks:", library.module.output_guards_enabled())
        """
    result = _python(code, churn=True, env=env)
    out = _clean(result)
    assert "churned" in out and "guards after the checks: False" in out, out
    past = "the kernel wrote past the end of output 'y'"
    assert f"short_shape | faulty_ops::short_shape: {past}" in out, out
    assert f"narrow_dtype | faulty_ops::narrow_dtype: {past}" in out, out
    unwritten = "the kernel left the end of output 'y' unwritten"
    assert f"wide_dtype | faulty_ops::wide_dtype: {unwritten}" in out, out
    assert (
        "short_gradient | faulty_ops::short_gradient_backward: the kernel wrote past the end of "
        "output 'grad_x'"
    ) in out, out


def test_c_a_second_library_of_a_taken_namespace_is_refused_before_registering(faulty, tmp_path):
    # A second library of the same namespace and operator names: a module
    # with the loaded one's contract under another name and file, whose
    # register_operators records that it was called.
    twin = tmp_path / faulty.name.replace("faulty_ops_torch", "faulty_twin")
    out = _clean(
        _python(
            f"""
            import sys, types, opbridge
            real = opbridge.load_library({str(faulty)!r}).module
            module = types.ModuleType("faulty_twin")
            names = [k for k in dir(real) if not k.startswith("__") or k == "__version__"]
            module.__dict__.update({{k: getattr(real, k) for k in names}})
            module.__file__ = {str(twin)!r}
            calls = []
            module.register_operators = lambda: calls.append(1)
            try:
                opbridge.load_library(module)
            except ValueError as error:
                print("refused |", error)
            print("twin registered:", bool(calls))
            """
        )
    )
    assert (
        f"refused | opbridge.load_library: refused library 'faulty_ops' ({twin}): torch namespace "
        "'faulty_ops' (and its operators faulty_ops::forgotten_gradient, faulty_ops::narrow_dtype, "
        "faulty_ops::scalar_row_stat, "
        "faulty_ops::short_gradient, faulty_ops::short_map, faulty_ops::short_map_gradient, "
        "faulty_ops::short_shape, faulty_ops::wide_dtype, faulty_ops::wide_row_stat) is already "
        "held by library "
        f"'faulty_ops' ({faulty}); none of its operators was registered"
    ) in out, out
    assert "twin registered: False" in out, out


def test_c_a_library_with_an_operator_torch_has_registers_none_of_its_operators(faulty):
    out = _clean(
        _python(
            f"""
            import torch, opbridge
            fragment = torch.library.Library("faulty_ops", "FRAGMENT")
            fragment.define("wide_dtype(Tensor x) -> Tensor")
            try:
                opbridge.load_library({str(faulty)!r})
            except ValueError as error:
                print("refused |", error)
            print("short_shape registered:", hasattr(torch.ops.faulty_ops, "short_shape"))
            # Once the operator is gone, the same library loads.
            fragment._destroy()
            library = opbridge.load_library({str(faulty)!r})
            x = torch.randn(3, 4)
            print("loaded:", torch.equal(torch.ops.faulty_ops.short_gradient(x), x))
            """
        )
    )
    assert (
        f"refused | opbridge.load_library: refused library 'faulty_ops' ({faulty}): PyTorch "
        "already has faulty_ops::wide_dtype, registered outside opbridge's libraries "
        "(torch.library or another extension); none of its operators was registered"
    ) in out, out
    assert "short_shape registered: False" in out and "loaded: True" in out, out
