"""The built-in demo: a small model using every opbridge operator, exported
by both routes, run in ONNX Runtime, compared with PyTorch and timed."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

import opbridge
from opbridge import ONNX_DOMAIN


class DemoBlock(nn.Module):
    """Pre-norm MLP block: x + fc2(scaled_clamp(fc1(rms_norm(x))))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = opbridge.nn.RMSNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = opbridge.nn.ScaledClamp(0.5, min_val=0.0, max_val=6.0)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class DemoModel(nn.Module):
    """Two MLP blocks and a biased final RMSNorm over [batch, seq, dim]."""

    def __init__(self, dim: int = 256, hidden: int = 1024, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(DemoBlock(dim, hidden) for _ in range(depth))
        self.norm = opbridge.nn.RMSNorm(dim, eps=1e-5, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def build_demo(seed: int = 0, batch: int = 4, seq: int = 64, dim: int = 256):
    """The demo model (random weights, fixed seed) and an example input."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = DemoModel(dim=dim).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, opbridge.nn.RMSNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=generator))
                if module.bias is not None:
                    module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
    x = torch.randn(batch, seq, dim, generator=generator)
    return model, (x,)


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


@dataclass
class RouteResult:
    route: str
    exporter: str
    path: Path
    opbridge_nodes: int
    total_nodes: int
    max_abs_err: float
    ort_ms: float


def run_demo(out_dir: Path, runs: int = 30, seed: int = 0) -> list[str]:
    """Runs the demo; returns the report lines."""
    model, args = build_demo(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        expected = model(*args).numpy()
        torch_ms = median_ms(lambda: model(*args), runs)
    results = []
    for route, exporter in [
        ("custom", "dynamo"),
        ("standard", "dynamo"),
        ("custom", "legacy"),
        ("standard", "legacy"),
    ]:
        suffix = "" if exporter == "dynamo" else "_legacy"
        path = out_dir / f"demo_{route}{suffix}.onnx"
        proto = opbridge.export.export(
            model,
            args,
            path,
            route=route,
            dynamic_batch=True,
            dynamo=exporter == "dynamo",
            verbose=False,
        )
        session = opbridge.runtimes.onnxruntime.InferenceSession(str(path))
        feed = {session.get_inputs()[0].name: args[0].numpy()}
        got = session.run(None, feed)[0]
        results.append(
            RouteResult(
                route=route,
                exporter=exporter,
                path=path,
                opbridge_nodes=sum(n.domain == ONNX_DOMAIN for n in proto.graph.node),
                total_nodes=len(proto.graph.node),
                max_abs_err=float(np.abs(got - expected).max()),
                ort_ms=median_ms(lambda s=session, f=feed: s.run(None, f), runs),
            )
        )

    # The dynamo exports, as written, through every check opbridge.verify has.
    reports = {
        r.route: opbridge.verify(model, args, onnx_model=r.path, route=r.route)
        for r in results
        if r.exporter == "dynamo"
    }

    shape = "x".join(str(d) for d in args[0].shape)
    lines = [
        f"opbridge {opbridge.__version__} demo: DemoModel, input [{shape}] float32, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        "",
        "| path | exporter | nodes (opbridge) | max abs err vs torch | median ms "
        "| vs torch eager |",
        "|---|---|---|---|---|---|",
        f"| torch eager (opbridge ops) | - | - | 0 | {torch_ms:.3f} | 1.00x |",
    ]
    for r in results:
        lines.append(
            f"| ORT, {r.route} route | {r.exporter} | {r.total_nodes} ({r.opbridge_nodes}) | "
            f"{r.max_abs_err:.2e} | {r.ort_ms:.3f} | {torch_ms / r.ort_ms:.2f}x |"
        )
    lines += ["", "models: " + ", ".join(str(r.path) for r in results)]
    lines += ["", *verify_table(reports), ""]
    worst = max(r.max_abs_err for r in results)
    from opbridge.demo.models import demo_report  # the other built-in models

    model_lines, models_worst = demo_report(out_dir, seed)
    lines += model_lines
    worst = max(worst, models_worst)
    verified = all(report.passed for report in reports.values())
    try:
        import transformers  # noqa: F401  (optional: the Hugging Face part needs it)
    except ImportError:
        lines += ["", "Hugging Face part skipped: transformers is not installed"]
    else:
        from opbridge.integrations.hf import demo_lines

        hf_lines, hf_passed = demo_lines(out_dir, seed, runs=runs)
        lines += hf_lines
        verified = verified and hf_passed
    passed = worst <= 1e-4 and verified
    lines.append(
        f"agreement: {'PASS' if passed else 'FAIL'} (max abs err {worst:.2e}; "
        f"verify {'passed' if verified else 'FAILED'} for routes {', '.join(reports)})"
    )
    return lines


def verify_table(reports: dict) -> list[str]:
    """A short summary of ``opbridge.verify`` per route."""
    first = next(iter(reports.values()))
    cases = list(dict.fromkeys(c.case for c in first.cells))
    lines = [
        f"verify (opbridge.verify: structure, {len(first.levels)} optimization levels, "
        f"{len(cases)} input cases, batch sweep {first.batch_sweep.removeprefix('ran: ')}, "
        "layer by layer; `opbridge verify demo --route custom` for the full report)",
        "",
        "| verify | result | max abs err | modules compared | first divergence |",
        "|---|---|---|---|---|",
    ]
    for route, report in reports.items():
        lines.append(
            f"| verify, {route} route | {'PASS' if report.passed else 'FAIL'} | "
            f"{report.max_abs_err:.2e} | {report.layers_compared} | "
            f"{report.first_divergence or '-'} |"
        )
    return lines
