"""What adopting opbridge changes in ONNX Runtime, for any model: the model
as the user had it, exported by the standard route, beside the patched model
exported by the custom and the standard route, each run and timed in ONNX
Runtime and compared with the unpatched torch model."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

PATHS = (
    ("unpatched", "standard"),
    ("patched", "custom"),
    ("patched", "standard"),
)


def compare_exports(
    original: nn.Module,
    example: tuple,
    *,
    name: str,
    wrap: Callable[[nn.Module], nn.Module] = lambda model: model,
    dynamic_shapes: Any = None,
    runs: int = 20,
    out_dir: Any = None,
) -> list[dict]:
    """Rows, one per path in :data:`PATHS`: ``name``, ``path`` ("patched,
    custom route"...), ``nodes``, ``opbridge_nodes``, ``max_abs_err`` (vs
    the unpatched torch model), ``ms`` (median of ``runs`` ONNX Runtime
    calls, the paths timed in turn), ``replaced`` (modules ``opbridge.patch`` replaced; 0 for the
    unpatched path) and ``file`` (the ONNX file under ``out_dir``, if given).
    ``original`` is left as it is (a copy is patched); ``wrap`` makes the
    exported module from a model (e.g. ``opbridge.integrations.hf.Output``)."""
    from opbridge import ONNX_DOMAIN
    from opbridge import export as obonnx
    from opbridge.patching import patch
    from opbridge.runtimes import onnxruntime as obort

    patched = patch(copy.deepcopy(original))
    replaced = len(patched.opbridge_patch_summary)
    models = {"unpatched": wrap(original), "patched": wrap(patched)}
    with torch.no_grad():
        want = models["unpatched"](*example).numpy()
    rows, calls = [], []
    for which, route in PATHS:
        path = None
        if out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            path = Path(out_dir) / f"{name}_{which}_{route}.onnx"
        proto = obonnx.export(
            models[which], example, path, route=route, dynamic_shapes=dynamic_shapes
        )
        session = obort.InferenceSession(proto.SerializeToString())
        feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), example, strict=True)}
        got = session.run(None, feed)[0]
        rows.append(
            {
                "name": name,
                "path": f"{which}, {route} route",
                "nodes": len(proto.graph.node),
                "opbridge_nodes": sum(n.domain == ONNX_DOMAIN for n in proto.graph.node),
                "max_abs_err": float(np.abs(got - want).max()),
                "replaced": replaced if which == "patched" else 0,
                "file": str(path) if path else None,
            }
        )
        calls.append(lambda s=session, f=feed: s.run(None, f))
    for row, ms in zip(rows, interleaved_ms(calls, runs), strict=True):
        row["ms"] = ms
    return rows


def interleaved_ms(calls: list[Callable[[], object]], runs: int, warmup: int = 3) -> list[float]:
    """Median milliseconds of each call, timed in turn (one call of each per
    round), so a change in the machine's load touches them all alike."""
    for call in calls:
        for _ in range(warmup):
            call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        for call, record in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            record.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(record) for record in times]


def table(rows: list[dict]) -> list[str]:
    """Markdown rows per model: replaced modules, each path's median and the
    patched custom route's speedup over the unpatched standard export."""
    lines = [
        "| model | modules replaced | unpatched standard ms | patched custom ms | speedup "
        "| patched standard ms | max abs err (custom) |",
        "|---|---|---|---|---|---|---|",
    ]
    by_name: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_name.setdefault(row["name"], {})[row["path"]] = row
    for name, paths in by_name.items():
        base = paths["unpatched, standard route"]
        custom = paths["patched, custom route"]
        standard = paths["patched, standard route"]
        lines.append(
            f"| {name} | {custom['replaced']} | {base['ms']:.3f} | {custom['ms']:.3f} | "
            f"{base['ms'] / custom['ms']:.2f}x | {standard['ms']:.3f} | "
            f"{custom['max_abs_err']:.2e} |"
        )
    return lines
