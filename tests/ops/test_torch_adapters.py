"""Both PyTorch libraries of one build: the default-ABI one under the build's
torch, the stable-ABI one (lib<name>_torch_stable.so) under any other from
its target on, or when OPBRIDGE_TORCH_ADAPTER forces it; what the stable one
needs of torch, read from the file."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

import opbridge
from opbridge.sdk import abi

from processes import python_code


def test_the_build_torch_gets_the_default_library():
    adapter = opbridge.libraries()[0].torch_adapter
    assert adapter.kind == "default"
    assert adapter.library.name == "libopbridge_torch.so"
    assert [path.name for path in adapter.available] == [
        "libopbridge_torch.so",
        "libopbridge_torch_stable.so",
    ]
    assert all(path.is_file() for path in adapter.available)
    assert adapter.kernels.name == "libopbridge_torch_kernels.so" and adapter.kernels.is_file()
    assert adapter.built_with == torch.__version__
    assert f"torch {torch.__version__} is the torch it was built with" in adapter.reason
    assert not opbridge._C.STABLE_ABI


def test_doctor_names_the_library_loaded_and_why():
    result = subprocess.run(
        [sys.executable, "-m", "opbridge", "doctor"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "libopbridge_torch.so (default ABI): torch" in result.stdout
    forced = subprocess.run(
        [sys.executable, "-m", "opbridge", "doctor"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OPBRIDGE_TORCH_ADAPTER": "stable"},
    )
    assert forced.returncode == 0, forced.stdout + forced.stderr
    expected = "libopbridge_torch_stable.so (stable ABI): OPBRIDGE_TORCH_ADAPTER=stable"
    assert expected in forced.stdout


def test_an_unknown_adapter_is_refused_by_name():
    result = python_code("import opbridge", OPBRIDGE_TORCH_ADAPTER="fast", timeout=600)
    assert result.returncode != 0
    expected = "OPBRIDGE_TORCH_ADAPTER must be 'default' or 'stable' (or unset), got 'fast'"
    assert expected in result.stderr


def test_the_stable_library_needs_the_stable_c_api_only():
    default, stable = opbridge.libraries()[0].torch_adapter.available
    used = abi.torch_symbols_used(stable)
    assert any(name.startswith("aoti_torch_") for name in used), sorted(used)
    assert abi.stable_abi_violations(stable) == []
    # The check can fail: the default-ABI library needs torch's C++ ABI.
    outside = abi.stable_abi_violations(default)
    assert any(name.startswith(("at::", "c10::", "torch::")) for name in outside), outside[:10]


def test_every_builtin_operator_on_the_stable_library():
    # The SDK's checks of every built-in operator: its reference and
    # opcheck (schemas, fake kernels, autograd registration); the default
    # library meets them in tests/ops/test_cards.py. (Under another torch,
    # scripts/check_stable_abi.sh runs scripts/stable_abi_smoke.py on it.)
    adapter = "stable"
    code = f"""
import opbridge
from opbridge.sdk import testing

assert opbridge.libraries()[0].torch_adapter.kind == {adapter!r}
cards = [c for c in opbridge.ops.cards().values() if c.namespace == "opbridge"]
assert len(cards) >= 5, cards
for card in cards:
    testing.check_reference(card)
    testing.check_opcheck(card)
print(len(cards), "checked")
"""
    result = python_code(code, OPBRIDGE_TORCH_ADAPTER=adapter, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked" in result.stdout


def test_torch_ops_load_library_registers_the_operators():
    # PyTorch's convention: loading the library registers its operators (a
    # fresh process, no opbridge imported); opbridge imported afterwards
    # finds them registered by its own library and loads.
    library = opbridge.libraries()[0].torch_library_path
    code = f"""
import torch

torch.ops.load_library({str(library)!r})
x, w = torch.randn(2, 8), torch.rand(8) + 0.5
y = torch.ops.opbridge.rms_norm(x, w)
torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
import opbridge

torch.testing.assert_close(opbridge.rms_norm(x, w), y)
torch.ops.load_library({str(library)!r})
print("registered")
"""
    result = python_code(code, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "registered" in result.stdout
    assert "opbridge" not in result.stderr, result.stderr


def test_loading_the_library_after_opbridge_registers_nothing_twice():
    library = opbridge.libraries()[0].torch_library_path
    code = f"""
import ctypes

import torch

import opbridge

handle = ctypes.CDLL({str(library)!r})
register = handle.opbridge_register_torch_operators
register.restype = ctypes.c_char_p
assert register() is None
print(opbridge.scaled_clamp(torch.ones(2), 2.0).tolist())
"""
    result = python_code(code, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[2.0, 2.0]" in result.stdout
    assert result.stderr.count("opbridge:") == 0, result.stderr


def test_a_taken_name_registers_nothing_and_says_so_on_stderr():
    library = opbridge.libraries()[0].torch_library_path
    code = f"""
import ctypes

import torch

lib = torch.library.Library("opbridge", "DEF")
lib.define("rms_norm(Tensor x) -> Tensor")
handle = ctypes.CDLL({str(library)!r})
register = handle.opbridge_register_torch_operators
register.restype = ctypes.c_char_p
print("again:", register().decode())
assert not hasattr(torch.ops.opbridge, "scaled_clamp")
"""
    result = python_code(code, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "opbridge: registering its operators with PyTorch failed" in result.stderr
    assert "again: opbridge: registering its operators with PyTorch failed" in result.stdout


def test_the_stable_library_registers_when_loaded_too():
    stable = opbridge.libraries()[0].torch_adapter.available[-1]
    code = f"""
import torch

torch.ops.load_library({str(stable)!r})
print(torch.ops.opbridge.scaled_clamp(torch.ones(2), 2.0).tolist())
"""
    result = python_code(code, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[2.0, 2.0]" in result.stdout
