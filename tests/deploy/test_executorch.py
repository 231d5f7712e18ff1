"""Models with opbridge's ops, lowered to ExecuTorch programs (.pte) and run in
ExecuTorch's runtime on opbridge's kernels (libopbridge_executorch.so, one
kernel per spec for its out= form, loaded by opbridge.deploy.executorch),
against eager PyTorch.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from executorch import version as executorch_version
from executorch.extension.pybindings import portable_lib
from torch import nn

import opbridge
from opbridge import nn as onn
from opbridge.deploy import executorch

DIM = 16


@pytest.fixture(scope="module")
def kernels() -> list[str]:
    return executorch.load_kernels()


class Block(nn.Module):
    """rms_norm (with a bias), add_rms_norm (two outputs), a Linear (ExecuTorch's
    own kernels), bias_gelu (a string attribute) and scaled_clamp."""

    def __init__(self):
        super().__init__()
        self.norm = onn.RMSNorm(DIM, bias=True)
        self.add_norm = onn.AddRMSNorm(DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.gelu = onn.BiasGELU(DIM, approximate="tanh")
        self.clamp = onn.ScaledClamp(0.75, -0.5, 0.5)
        with torch.no_grad():
            for module in (self.norm, self.add_norm, self.gelu):
                for parameter in module.parameters():
                    parameter.copy_(torch.randn_like(parameter))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, summed = self.add_norm(self.norm(x), residual)
        return self.clamp(self.gelu(self.proj(y))), summed


def operators(path: Path) -> set[str]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(path.read_bytes())
    program = getattr(program, "program", program)
    return {f"{op.name}.{op.overload}" for plan in program.execution_plan for op in plan.operators}


@pytest.fixture(scope="module")
def block_program(tmp_path_factory) -> tuple[nn.Module, Path]:
    torch.manual_seed(0)
    model = Block().eval()
    example = (torch.randn(4, DIM), torch.randn(4, DIM))
    return model, executorch.to_pte(model, example, tmp_path_factory.mktemp("pte") / "block.pte")


def test_every_spec_has_a_kernel_in_the_runtime(kernels):
    names = kernels
    assert executorch.load_kernels() == names
    assert names == sorted(f"opbridge::{name}.out" for name in opbridge.specs()), names
    assert set(names) <= set(portable_lib._get_operator_names())


def test_program_calls_the_out_variants(block_program):
    _, path = block_program
    ops = operators(path)
    for name in ("rms_norm", "add_rms_norm", "bias_gelu", "scaled_clamp"):
        assert f"opbridge::{name}.out" in ops, ops


def test_program_equals_eager(kernels, block_program):
    model, path = block_program
    for seed in (1, 2):
        torch.manual_seed(seed)
        inputs = (torch.randn(4, DIM), torch.randn(4, DIM))
        with torch.no_grad():
            expected = model(*inputs)
        got = executorch.run_pte(path, inputs)
        assert len(got) == 2
        for actual, reference in zip(got, expected, strict=True):
            torch.testing.assert_close(actual, reference, rtol=1e-5, atol=1e-5)
        assert executorch.last_error() == ""


class Norm(nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return opbridge.scaled_clamp(opbridge.rms_norm(x, weight, None, 1e-5), 2.0, -1.0, 1.0)


@pytest.fixture(scope="module")
def dynamic_program(tmp_path_factory) -> Path:
    rows, cols = torch.export.Dim("rows", min=1, max=32), torch.export.Dim("cols", min=2, max=64)
    example = (torch.randn(4, DIM), torch.randn(DIM))
    return executorch.to_pte(
        Norm(),
        example,
        tmp_path_factory.mktemp("pte") / "norm.pte",
        dynamic_shapes=({0: rows, 1: cols}, {0: cols}),
    )


@pytest.mark.parametrize("shape", [(3, 8), (32, 64), (1, 2)])
def test_dynamic_shapes_resize_the_outputs(kernels, dynamic_program, shape):
    torch.manual_seed(shape[0])
    x, weight = torch.randn(*shape), torch.randn(shape[1])
    (got,) = executorch.run_pte(dynamic_program, (x, weight))
    torch.testing.assert_close(got, Norm()(x, weight), rtol=1e-5, atol=1e-5)
    assert executorch.last_error() == ""


def test_bad_input_fails_the_call_naming_op_and_argument(kernels, dynamic_program):
    # The runtime checks each input against its upper bound only: a weight
    # whose size differs from x's last dimension reaches the kernel.
    with pytest.raises(RuntimeError) as raised:
        executorch.run_pte(dynamic_program, (torch.randn(3, 8), torch.randn(6)))
    message = executorch.last_error()
    assert message in str(raised.value)
    assert "opbridge::RmsNorm" in message, message
    assert "weight" in message, message
    assert "[6]" in message and "8" in message, message


def test_a_second_copy_registers_nothing(kernels, tmp_path):
    # ExecuTorch aborts the process on a kernel name registered twice: a
    # second copy of the library (another path) refuses its kernels instead.
    copy = tmp_path / "libopbridge_executorch_copy.so"
    copy.write_bytes(opbridge.libraries()[0].adapter_path("executorch").read_bytes())
    second = ctypes.CDLL(str(copy))
    second.opbridge_executorch_kernels.restype = ctypes.c_char_p
    second.opbridge_executorch_last_error.restype = ctypes.c_char_p
    assert second.opbridge_executorch_kernels() == b""
    assert "already has a kernel 'opbridge::" in second.opbridge_executorch_last_error().decode()
    assert kernels == sorted(f"opbridge::{name}.out" for name in opbridge.specs())
    assert executorch.load_kernels() == kernels


def test_another_executorch_release_registers_nothing():
    # A fresh process whose executorch reports another release: refused
    # before any kernel reaches the runtime's registry.
    code = textwrap.dedent(
        """
        from executorch import version
        from executorch.extension.pybindings import portable_lib
        from opbridge.deploy import executorch

        version.__version__ = "0.1.0"
        try:
            executorch.load_kernels()
        except RuntimeError as error:
            print("refused |", error)
        names = portable_lib._get_operator_names()
        print("registered |", [n for n in names if n.startswith("opbridge::")])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = opbridge.libraries()[0].adapter_path("executorch").name
    assert (
        f"refused | opbridge.deploy.executorch: {built} was built against executorch "
        f"{executorch_version.__version__}, this process runs executorch 0.1.0: its kernels were "
        "not registered"
    ) in result.stdout, result.stdout
    assert "registered | []" in result.stdout, result.stdout


def test_a_library_without_executorch_kernels_is_named(kernels):
    import dataclasses

    library = dataclasses.replace(opbridge.libraries()[0], name="no_such_ops")
    with pytest.raises(
        RuntimeError,
        match=r"'no_such_ops' has no ExecuTorch kernels: .*libno_such_ops_executorch\.so not found",
    ):
        executorch.load_kernels(library)
    with pytest.raises(ValueError, match="no loaded library named 'nope'"):
        executorch.load_kernels("nope")


def test_a_library_is_found_by_namespace_or_by_name(monkeypatch):
    import dataclasses

    from opbridge import _library

    builtin = opbridge.libraries()[0]
    other = dataclasses.replace(builtin, name="my_fused_ops", torch_namespace="myops")
    monkeypatch.setitem(_library._LIBRARIES, other.torch_namespace, other)
    assert executorch._library_of(None) is builtin
    assert executorch._library_of("opbridge") is builtin
    assert executorch._library_of("myops") is other
    assert executorch._library_of("my_fused_ops") is other
    assert executorch._library_of(other) is other
    # (Other test files of the same process may have loaded more libraries.)
    with pytest.raises(
        ValueError, match=r"no loaded library named 'nope' \(loaded: opbridge, (.+, )?my_fused_ops"
    ):
        executorch._library_of("nope")
