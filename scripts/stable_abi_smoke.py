"""Smoke test of opbridge's stable-ABI PyTorch library (lib<name>_torch_stable.so,
which the extension module loads under a torch other than the build's, or
under OPBRIDGE_TORCH_ADAPTER=stable; or a build with OPBRIDGE_TORCH_STABLE_ABI=ON):

    python scripts/stable_abi_smoke.py [USER_PACKAGE ...]

Runs, outside the checkout, an op forward against a reference, autograd
(backward and gradcheck), torch.compile with dynamic shapes, torch.export
with a dynamic dimension, a custom-route ONNX export run in ONNX Runtime,
and for each user package given (a package built through the SDK in the
build environment, as examples/fused_norm's my_fused_ops) that it loads its
stable-ABI library, whose torch symbols are all of the stable C API, and that
each of its ops has a card (``opbridge check-op PACKAGE`` runs the SDK's
checks of them). Exits non-zero on the first failure.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import torch

import opbridge


def check_library_symbols(path) -> None:
    # Only LibTorch's stable C API: no symbol of torch's C++ ABI.
    from opbridge.sdk import abi

    outside = abi.stable_abi_violations(path)
    assert not outside, f"{path.name} needs torch symbols outside the stable C API: {outside[:5]}"
    used = len(abi.torch_symbols_used(path))
    assert used, f"{path.name} and its kernels library need no torch symbol"
    print(f"{path.name}: {used} torch symbols, all of the stable C API")


def main() -> int:
    built = opbridge._C.BUILD_TORCH_VERSION
    adapter = opbridge.libraries()[0].torch_adapter
    assert adapter.kind == "stable", f"opbridge loaded its {adapter.kind} library: {adapter.reason}"
    print(
        f"opbridge built against torch {built} (stable ABI >= {opbridge._C.TORCH_TARGET_VERSION}), "
        f"running torch {torch.__version__}: {adapter.library.name} ({adapter.reason})"
    )
    check_library_symbols(adapter.library)

    torch.manual_seed(0)
    x, w = torch.randn(4, 64, dtype=torch.float64), torch.rand(64, dtype=torch.float64) + 0.5

    def reference(a, b):
        return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * b

    torch.testing.assert_close(opbridge.rms_norm(x, w), reference(x, w))
    print("forward: ok")

    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    opbridge.rms_norm(a, b).sum().backward()
    a2, b2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    reference(a2, b2).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
    assert torch.autograd.gradcheck(
        lambda p, q: opbridge.rms_norm(p, q),
        (x[:2, :8].clone().requires_grad_(), w[:8].clone().requires_grad_()),
    )
    print("autograd: ok")

    compiled = torch.compile(lambda p, q: opbridge.rms_norm(p, q) * 2, fullgraph=True, dynamic=True)
    for rows in (3, 5):
        p = torch.randn(rows, 64)
        torch.testing.assert_close(compiled(p, w.float()), opbridge.rms_norm(p, w.float()) * 2)
    print("torch.compile: ok")

    class Norm(torch.nn.Module):
        def forward(self, p, q):
            return opbridge.rms_norm(p, q)

    rows = torch.export.Dim("rows")
    exported = torch.export.export(
        Norm(), (torch.randn(4, 64), w.float()), dynamic_shapes=({0: rows}, None)
    )
    p = torch.randn(7, 64)
    torch.testing.assert_close(exported.module()(p, w.float()), opbridge.rms_norm(p, w.float()))
    print("torch.export: ok")

    model = opbridge.nn.RMSNorm(64).eval()
    p = torch.randn(4, 64)
    proto = opbridge.export.export(model, (p,), route="custom", verbose=False)
    session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
    (got,) = session.run(None, {session.get_inputs()[0].name: p.numpy()})
    np.testing.assert_allclose(got, model(p).detach().numpy(), rtol=1e-5, atol=1e-5)
    print("custom-route ONNX export in ONNX Runtime: ok")

    from opbridge.sdk import testing

    for package in sys.argv[1:]:
        library = importlib.import_module(package).LIBRARY
        loaded = library.torch_adapter
        assert loaded.kind == "stable", f"{package} loaded {loaded.library.name}: {loaded.reason}"
        check_library_symbols(loaded.library)
        names = [card.name for card in testing.package_cards(package)]
        print(f"user package {package}: {loaded.library.name}, cards for {names}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
