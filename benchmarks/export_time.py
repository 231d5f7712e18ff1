"""Seconds per `opbridge.export.export` with the dynamo exporter, with torch's
ONNX registry built once per opset and copied (opbridge.export.registry, the
default) and built afresh on every export (torch's own behaviour), side by
side in one process:

    .venv/bin/python benchmarks/export_time.py [--exports 6] [--route custom]

Each round exports the demo model once each way, alternating which goes
first; the first export of the process (which builds the kept registry, and
imports the exporter) is left out. Prints the median seconds of each and
their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from unittest import mock

import torch

import opbridge
from opbridge.demo import build_demo
from opbridge.export import registry


def _export(model, args, route: str, opset: int) -> float:
    start = time.perf_counter()
    opbridge.export.export(model, args, io.BytesIO(), route=route, opset=opset)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", type=int, default=6, help="exports of each kind")
    parser.add_argument("--route", default="custom")
    parser.add_argument("--opset", type=int, default=18)
    options = parser.parse_args()

    model, args = build_demo()
    _export(model, args, options.route, options.opset)
    times: dict[str, list[float]] = {"kept": [], "afresh": []}
    for round_ in range(options.exports):
        order = ("kept", "afresh") if round_ % 2 == 0 else ("afresh", "kept")
        for kind in order:
            fresh = mock.patch.object(registry, "_registry_class", lambda: None)
            with fresh if kind == "afresh" else contextlib.nullcontext():
                times[kind].append(_export(model, args, options.route, options.opset))
    kept, afresh = (statistics.median(times[k]) for k in ("kept", "afresh"))
    print(
        f"opbridge.export.export, dynamo, {options.route} route, opset {options.opset}, "
        f"demo model, torch {torch.__version__}, {options.exports} exports each"
    )
    print("| torch's ONNX registry | median s per export |")
    print("|---|---|")
    print(f"| built afresh per export (torch's own) | {afresh:.2f} |")
    print(f"| built once per opset, copied | {kept:.2f} |")
    print(f"speed-up: {afresh / kept:.1f}x")


if __name__ == "__main__":
    main()
