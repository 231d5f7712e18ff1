"""``opbridge quantize``: int8 quantization of an ONNX model with opbridge nodes
(:mod:`opbridge.deploy.quantize`), and its data-set report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from opbridge.cli.common import (
    FactoryError,
    add_import_argument,
    build_model,
    import_modules,
    require_libraries,
)
from opbridge.deploy.quantize import dataset_report, load_samples, model_inputs, quantize

HELP = "int8-quantize an ONNX model with opbridge nodes (ONNX Runtime's quantizer)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="the float ONNX model (any route)")
    parser.add_argument("output", type=Path, help="where to write the int8 model")
    parser.add_argument(
        "--calibration",
        help="calibration samples: DATA.npz (one array per input: samples stacked on a new "
        "first axis, or batches along axis 0) or path/to/file.py:function returning an "
        "iterable of feeds",
    )
    parser.add_argument("--dynamic", action="store_true", help="dynamic quantization instead")
    parser.add_argument("--per-channel", action="store_true", help="per-channel weights")
    parser.add_argument(
        "--dataset", help="samples to compare over (as --calibration); needs --torch-model"
    )
    parser.add_argument(
        "--torch-model",
        help="the float PyTorch model, 'path/to/file.py:function' returning (model, inputs)",
    )
    parser.add_argument("--plot", type=Path, help="histogram of the per-sample errors (PNG)")
    parser.add_argument("--json", type=Path, help="the data-set report as JSON")
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    if bool(args.dataset) != bool(args.torch_model):
        print("opbridge quantize: --dataset and --torch-model go together", file=sys.stderr)
        return 2
    try:
        import_modules(args.imports)
        if args.model.is_file():
            # Before quantizing: the report counts the library nodes left in
            # float, and calibration runs them.
            require_libraries(args.model)
        torch_model = build_model(args.torch_model, "--torch-model")[0] if args.dataset else None
        result = quantize(
            args.model,
            args.output,
            args.calibration,
            mode="dynamic" if args.dynamic else "static",
            per_channel=args.per_channel,
        )
    except (ValueError, FileNotFoundError, RuntimeError, FactoryError) as error:
        print(f"opbridge quantize: {error}", file=sys.stderr)
        return 2
    quantized = sum(v for k, v in result.node_types.items() if "QuantizeLinear" in k)
    print(
        f"wrote {result.output} ({result.mode}; {result.calibration_samples} calibration "
        f"samples): {quantized} Q/DQ nodes, {result.library_nodes} library nodes left in float"
    )
    if args.dataset:
        torch_model.eval()
        inputs = model_inputs(os.fspath(args.output))
        try:
            samples = load_samples(args.dataset, list(inputs), inputs)
        except (ValueError, FileNotFoundError, FactoryError) as error:
            print(f"opbridge quantize: --dataset: {error}", file=sys.stderr)
            return 2
        report = dataset_report(args.output, torch_model, samples)
        print(report)
        if args.plot:
            report.plot(args.plot)
        if args.json:
            args.json.write_text(report.to_json())
    return 0
