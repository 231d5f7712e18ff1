"""int8 quantization of models with opbridge nodes, and accuracy over a data set.

:func:`quantize` runs ONNX Runtime's own quantizer (``quantize_static`` in
QDQ format, or ``quantize_dynamic``) on a model of any route. ONNX Runtime's
calibrator builds its ONNX Runtime session bare (no custom-op library), so a
custom-route model fails there; here the calibration session gets every
library the model needs registered (:func:`opbridge.runtimes.onnxruntime.session_options`),
for the duration of the call only. The quantizer leaves operators it does not
know in float: opbridge nodes keep float inputs and outputs, with
QuantizeLinear/DequantizeLinear pairs only where a neighbour is quantized
(the matrix products).

:func:`dataset_report` compares a model (quantized or not) with the float
PyTorch model over every sample of a data set: per sample the max and mean
absolute error and the cosine similarity of the outputs, their
distribution (percentiles), the worst samples by index, and a histogram.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99, 100)


@contextlib.contextmanager
def calibration_sessions_with_libraries(model: Any):
    """While active, ONNX Runtime's calibrator opens its sessions with the
    custom-op libraries ``model`` needs registered."""
    import onnxruntime
    from onnxruntime.quantization import calibrate

    from opbridge.runtimes.model import libraries_for
    from opbridge.runtimes.onnxruntime import session_options

    needed = libraries_for(model)
    original = calibrate.CalibraterBase.create_inference_session

    def create_inference_session(self):
        options = session_options(onnxruntime.SessionOptions(), needed)
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.infer_session = onnxruntime.InferenceSession(
            self.augmented_model_path, sess_options=options, providers=self.execution_providers
        )

    calibrate.CalibraterBase.create_inference_session = create_inference_session
    try:
        yield
    finally:
        calibrate.CalibraterBase.create_inference_session = original


# A model input's shape: a fixed dimension is an int, a dynamic one its
# dim_param (or None when it has no name); None for an input of unknown rank.
InputShape = Sequence[int | str | None] | None


def load_samples(
    source: Any,
    input_names: list[str],
    input_shapes: Mapping[str, InputShape] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Samples as ONNX Runtime feeds: from a ``.npz`` file with one array per
    model input (named after it), from a ``path/to/file.py:function``
    returning an iterable of feeds (dicts, or tuples in input order), or from
    such an iterable directly.

    A ``.npz`` array stacks the samples along a new first axis (``x[i]`` is
    sample ``i``'s ``x``). Given the model's ``input_shapes`` (by input name:
    a sequence of dimensions, an int for a fixed one, a str or None for a
    dynamic one; None for an input of unknown rank), an array of the input's
    own rank is taken as batches along axis 0 instead: cut into batches of the input's
    first dimension when that is fixed (its length must be a multiple of it),
    or into batches of one row each when it is dynamic. An array of another
    rank, or whose other dimensions differ from the input's fixed ones, is
    refused with a ValueError naming the file, the array, its shape and the
    shapes expected."""
    if isinstance(source, str | os.PathLike) and str(source).endswith(".npz"):
        return _npz_samples(os.fspath(source), input_names, input_shapes or {})
    if isinstance(source, str):
        from opbridge.sdk.factory import load_factory

        source = load_factory(source, "calibration data")()
    samples = []
    for i, sample in enumerate(source):
        if isinstance(sample, dict):
            feeds = {k: _numpy(v) for k, v in sample.items()}
        else:
            values = sample if isinstance(sample, tuple | list) else (sample,)
            if len(values) != len(input_names):
                raise ValueError(
                    f"opbridge.deploy.quantize: sample {i} has {len(values)} tensors, the model "
                    "takes "
                    f"{len(input_names)} ({input_names})"
                )
            feeds = dict(zip(input_names, (_numpy(v) for v in values), strict=True))
        samples.append(feeds)
    if not samples:
        raise ValueError("opbridge.deploy.quantize: the calibration data holds no samples")
    return samples


def _npz_samples(
    path: str, input_names: list[str], input_shapes: Mapping[str, InputShape]
) -> list[dict[str, np.ndarray]]:
    with np.load(path) as data:
        missing = [n for n in input_names if n not in data.files]
        if missing:
            raise ValueError(
                f"opbridge.deploy.quantize: {path} lacks arrays for inputs {missing} "
                f"(has {data.files}; one array per model input, samples along a new first "
                "axis or batches along axis 0)"
            )
        arrays = {n: data[n] for n in input_names}
    split = {n: _split(path, n, arrays[n], input_shapes.get(n)) for n in input_names}
    counts = {n: len(parts) for n, parts in split.items()}
    if len(set(counts.values())) != 1:
        shapes = {n: list(a.shape) for n, a in arrays.items()}
        raise ValueError(
            f"opbridge.deploy.quantize: {path} holds different sample counts per input: {counts} "
            f"(array shapes {shapes})"
        )
    count = next(iter(counts.values()))
    return [{n: split[n][i] for n in input_names} for i in range(count)]


def _fixed(dim: int | str | None) -> int | None:
    """A dimension's size when it is fixed (a positive int), else None."""
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return dim
    return None


def _dims(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _split(path: str, name: str, array: np.ndarray, shape: InputShape) -> list[np.ndarray]:
    """One input's samples from its array: along a new first axis (rank + 1),
    or batches along axis 0 (the input's rank)."""
    if shape is None:
        if array.ndim == 0:
            raise ValueError(
                f"opbridge.deploy.quantize: {path}: array {name!r} is a scalar; samples go along "
                "axis 0"
            )
        return [np.ascontiguousarray(x) for x in array]
    shape = list(shape)
    fixed = [_fixed(d) for d in shape]

    def fits(dims: tuple[int, ...], wanted: list[int | None]) -> bool:
        if len(dims) != len(wanted):
            return False
        return all(w is None or d == w for d, w in zip(dims, wanted, strict=True))

    batch = fixed[0] if shape else None
    expected = f"expected {_dims(['N', *shape])} (samples stacked on a new first axis)"
    if shape:
        rows = f"{batch}*k" if batch else "M"
        how = f"batches of {batch}" if batch else "batches of 1 row each"
        expected += f" or {_dims([rows, *shape[1:]])} ({how} along axis 0)"
    which = (
        f"opbridge.deploy.quantize: {path}: array {name!r} has shape {list(array.shape)}; the "
        "model's "
        f"input {name!r} is {_dims(shape)}"
    )
    if array.ndim == len(shape) + 1 and fits(array.shape[1:], fixed):
        return [np.ascontiguousarray(x) for x in array]
    if shape and array.ndim == len(shape) and fits(array.shape[1:], fixed[1:]):
        size = batch or 1
        if array.shape[0] % size:
            raise ValueError(
                f"{which}: its {array.shape[0]} rows along axis 0 are not a multiple of the "
                f"batch size {size}; {expected}"
            )
        return [np.ascontiguousarray(array[i : i + size]) for i in range(0, array.shape[0], size)]
    raise ValueError(f"{which}: {expected}")


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def model_inputs(model_path: str) -> dict[str, InputShape]:
    """The model's inputs (initializers aside), in order, with their shapes:
    a fixed dimension as an int, a dynamic one as its dim_param or None; None
    for an input without a shape."""
    import onnx

    proto = onnx.load(model_path, load_external_data=False)
    initializers = {i.name for i in proto.graph.initializer}
    inputs: dict[str, InputShape] = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            inputs[value.name] = None
            continue
        inputs[value.name] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
    return inputs


@dataclass
class QuantizeResult:
    output: str
    mode: str
    node_types: dict[str, int]  # "domain::op_type" -> count in the quantized model
    library_nodes: int  # opbridge (or other library) nodes, left in float
    calibration_samples: int = 0


def quantize(
    model: str | os.PathLike,
    output: str | os.PathLike,
    calibration: Any = None,
    *,
    mode: str = "static",
    per_channel: bool = False,
    nodes_to_exclude: list[str] | None = None,
) -> QuantizeResult:
    """Quantizes the ONNX model at ``model`` to int8 and writes ``output``.

    ``mode="static"``: QDQ format, int8 activations and weights, calibrated
    on ``calibration`` (see :func:`load_samples`; ONNX Runtime's MinMax
    calibration). ``mode="dynamic"``: weights int8, activations quantized at
    run time; no calibration. ``per_channel`` quantizes weights per output
    channel. Nodes of opbridge's (and other loaded) libraries stay float.
    """
    model, output = os.fspath(model), os.fspath(output)
    if mode not in ("static", "dynamic"):
        raise ValueError(
            f"opbridge.deploy.quantize: mode must be 'static' or 'dynamic', got {mode!r}"
        )
    if mode == "static" and calibration is None:
        raise ValueError(
            "opbridge.deploy.quantize: mode='static' needs calibration data (a .npz, "
            "'file.py:function' or an iterable of feeds); or use mode='dynamic'"
        )
    if not os.path.isfile(model):
        raise FileNotFoundError(f"opbridge.deploy.quantize: no ONNX model at {model}")
    with tempfile.TemporaryDirectory() as scratch:
        return _quantize(
            _prepared(model, scratch), output, calibration, mode, per_channel, nodes_to_exclude
        )


def _prepared(model: str, scratch: str) -> str:
    """``model`` without value_info entries for its initializers: the
    exporters record them, and ONNX Runtime's quantizer, which rewrites Gemm
    into MatMul with a transposed weight, then fails shape inference on the
    stale shape."""
    import onnx

    proto = onnx.load(model)
    initializers = {i.name for i in proto.graph.initializer}
    kept = [v for v in proto.graph.value_info if v.name not in initializers]
    if len(kept) == len(proto.graph.value_info):
        return model
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(kept)
    path = os.path.join(scratch, "model.onnx")
    onnx.save(proto, path)
    return path


def _quantize(model, output, calibration, mode, per_channel, nodes_to_exclude) -> QuantizeResult:
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    from opbridge._library import libraries

    count = 0
    if mode == "dynamic":
        quantize_dynamic(
            model,
            output,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            nodes_to_exclude=nodes_to_exclude or [],
        )
    else:
        inputs = model_inputs(model)
        samples = load_samples(calibration, list(inputs), inputs)
        count = len(samples)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.samples: Iterator = iter(samples)

            def get_next(self):
                return next(self.samples, None)

        with calibration_sessions_with_libraries(model):
            quantize_static(
                model,
                output,
                Reader(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                nodes_to_exclude=nodes_to_exclude or [],
            )
    quantized = onnx.load(output, load_external_data=False)
    domains = {lib.onnx_domain for lib in libraries()}
    types: dict[str, int] = {}
    for node in quantized.graph.node:
        key = f"{node.domain or 'ai.onnx'}::{node.op_type}"
        types[key] = types.get(key, 0) + 1
    library_nodes = sum(node.domain in domains for node in quantized.graph.node)
    return QuantizeResult(output, mode, dict(sorted(types.items())), library_nodes, count)


# ---------------------------------------------------------------- data-set accuracy


@dataclass
class SampleError:
    index: int
    max_abs_err: float
    mean_abs_err: float
    cosine: float


@dataclass
class DatasetReport:
    """Per-sample errors of ONNX Runtime against PyTorch over a data set."""

    samples: list[SampleError] = field(default_factory=list)
    worst: int = 5

    def percentiles(self, key: str) -> dict[str, float]:
        values = np.array([getattr(s, key) for s in self.samples], dtype=np.float64)
        return {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}

    def worst_samples(self) -> list[SampleError]:
        return sorted(self.samples, key=lambda s: (-s.max_abs_err, s.index))[: self.worst]

    def summary(self) -> dict:
        return {
            "samples": len(self.samples),
            "max_abs_err": self.percentiles("max_abs_err"),
            "mean_abs_err": self.percentiles("mean_abs_err"),
            "cosine": {
                "min": float(min(s.cosine for s in self.samples)),
                "mean": float(np.mean([s.cosine for s in self.samples])),
            },
            "worst": [asdict(s) for s in self.worst_samples()],
        }

    def __str__(self) -> str:
        s = self.summary()
        lines = [f"{s['samples']} samples, ONNX Runtime vs PyTorch (all outputs of each sample)"]
        for key in ("max_abs_err", "mean_abs_err"):
            cells = ", ".join(f"{p} {v:.3g}" for p, v in s[key].items())
            lines.append(f"  {key}: {cells}")
        lines.append(f"  cosine: min {s['cosine']['min']:.6f}, mean {s['cosine']['mean']:.6f}")
        worst = ", ".join(f"#{w['index']} ({w['max_abs_err']:.3g})" for w in s["worst"])
        lines.append(f"  worst samples by max abs err: {worst}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"summary": self.summary(), "samples": [asdict(x) for x in self.samples]})

    def plot(self, path: str | os.PathLike) -> None:
        """A histogram of the per-sample max and mean absolute errors (PNG)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        for ax, key in zip(axes, ("max_abs_err", "mean_abs_err"), strict=True):
            ax.hist([getattr(s, key) for s in self.samples], bins=min(30, len(self.samples)))
            ax.set_xlabel(key.replace("_", " "))
            ax.set_ylabel("samples")
        fig.suptitle(f"ONNX Runtime vs PyTorch over {len(self.samples)} samples")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def dataset_report(
    onnx_model: Any,
    torch_model: Callable,
    samples: Iterable[dict[str, np.ndarray]],
    *,
    session: Any = None,
    worst: int = 5,
) -> DatasetReport:
    """Runs every sample (feeds by input name, in the model's input order for
    ``torch_model``) through ONNX Runtime and ``torch_model``; errors over all
    outputs of a sample flattened together."""
    import torch

    from opbridge.runtimes.onnxruntime import InferenceSession

    session = session or InferenceSession(onnx_model)
    names = [i.name for i in session.get_inputs()]
    report = DatasetReport(worst=worst)
    for index, feeds in enumerate(samples):
        got = session.run(None, {n: feeds[n] for n in names})
        with torch.no_grad():
            want = torch_model(*(torch.from_numpy(np.asarray(feeds[n])) for n in names))
        want = want if isinstance(want, tuple | list) else (want,)
        a = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in got])
        b = np.concatenate([w.detach().double().numpy().ravel() for w in want])
        diff = np.abs(a - b)
        norm = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosine = float(a @ b / norm) if norm > 0 else float(np.array_equal(a, b))
        report.samples.append(SampleError(index, float(diff.max()), float(diff.mean()), cosine))
    if not report.samples:
        raise ValueError("opbridge.deploy.quantize.dataset_report: the data set holds no samples")
    return report


# ---------------------------------------------------------------- command line
