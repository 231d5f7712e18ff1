"""opbridge.verify against the user's own model (reference=), dynamic sequence
lengths, shapes read from the exported graph, the batch-1 warning, and
repeated run errors counted once."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import opbridge
from opbridge.__main__ import main
from opbridge.verify import (
    FAIL,
    IN_EXPORT,
    IN_PATCHING,
    NOT_APPLICABLE,
    ONNX_VS_REFERENCE,
    ONNX_VS_TORCH,
    PASS,
    TORCH_VS_REFERENCE,
    WARN,
    default_session_factory,
)

ONE_LEVEL = {"levels": ["disable_all"]}
NUDGED = "blocks.1.fc"


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.act = nn.Tanh()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(nn.Module):
    """Two residual blocks and a head over [batch, seq, 8]."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


class MlpNet(nn.Module):
    """What opbridge.patch rewrites: a LayerNorm, and a Linear + GELU pair in
    an nn.Sequential (the Linear's bias moves to the new BiasGELU)."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 16), nn.GELU(), nn.Linear(16, dim))

    def forward(self, x):
        return self.mlp(self.norm(x))


class Tokens(nn.Module):
    """Token ids and a mask, both [batch, seq]."""

    def __init__(self, vocab: int = 11):
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.proj = nn.Linear(8, 4)

    def forward(self, ids, mask):
        return self.proj(self.embed(ids)) * mask.unsqueeze(-1)


class Scale(nn.Module):
    """Multiplies by a constant (no parameter)."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class Pair(nn.Module):
    def __init__(self, first: float, second: float):
        super().__init__()
        self.a = Scale(first)
        self.b = Scale(second)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.b(self.a(x)))


def _net():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 3, 8),)


def _nudge(model: nn.Module, path: str) -> None:
    with torch.no_grad():
        model.get_submodule(path).weight[0, 0] += 1e-2


class _Shifted:
    """A session whose outputs are all off by ``shift``."""

    def __init__(self, session, shift: float):
        self.session, self.shift = session, shift

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        return [v + np.float32(self.shift) for v in self.session.run(names, feed)]


class _Crashing:
    """A session that fails every run with the same message."""

    def __init__(self, session):
        self.session = session

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : out of arena memory")


class _Feeds:
    """A session that records what it is fed."""

    def __init__(self, session, feeds: list):
        self.session, self.feeds = session, feeds

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        self.feeds.append({name: value.copy() for name, value in feed.items()})
        return self.session.run(names, feed)


def _agreement(report) -> dict[str, str]:
    return {a.name: a.status for a in report.agreement}


# ---------------------------------------------------------------- reference model


def test_reference_identical_copy_passes():
    model, args = _net()
    reference = copy.deepcopy(model)

    report = opbridge.verify(model, args, route="standard", reference=reference, **ONE_LEVEL)

    assert report.passed, report.format()
    assert _agreement(report) == {
        ONNX_VS_TORCH: PASS,
        TORCH_VS_REFERENCE: PASS,
        ONNX_VS_REFERENCE: PASS,
    }
    assert report.diverges_in is None and report.divergence() is None
    # Every case the sweep built ran against the reference, in PyTorch and in ONNX Runtime.
    cases = list(dict.fromkeys(c.case for c in report.cells))
    assert cases == ["example", "draw 1", "draw 2", "batch 1", "batch 16"]
    assert [r.case for r in report.reference_runs] == cases
    assert all(c.reference_status == PASS for c in report.cells)
    assert report.reference == "the given Net"
    modules = [r.module for r in report.reference_layers]
    assert modules == [
        "blocks.0.fc", "blocks.0.act", "blocks.0", "blocks.1.fc", "blocks.1.act", "blocks.1",
        "blocks", "head",
    ]  # fmt: skip
    assert all(r.status == PASS for r in report.reference_layers)
    assert report.reference_first_divergence is None
    text = report.format()
    assert "Against the reference model (the given Net)" in text
    assert "no divergence: all three comparisons agree" in text


def test_reference_nudged_layer_fails_on_the_torch_side():
    model, args = _net()
    reference = copy.deepcopy(model)
    _nudge(model, NUDGED)

    report = opbridge.verify(model, args, route="standard", reference=reference, **ONE_LEVEL)

    assert not report.passed
    # ONNX Runtime computes what the patched model does: the export is right.
    assert _agreement(report) == {
        ONNX_VS_TORCH: PASS,
        TORCH_VS_REFERENCE: FAIL,
        ONNX_VS_REFERENCE: FAIL,
    }
    assert report.diverges_in == IN_PATCHING
    assert all(r.status == FAIL for r in report.reference_runs)
    # Layer by layer: the nudged Linear is the first module that diverges.
    assert report.reference_first_divergence == NUDGED
    layers = {r.module: r for r in report.reference_layers}
    assert all(layers[m].status == PASS for m in ["blocks.0.fc", "blocks.0.act", "blocks.0"])
    assert layers[NUDGED].status == FAIL and layers[NUDGED].worst.max_abs_err > 1e-3
    failures = report.failures()
    assert any(line.startswith("layers vs reference: ") and NUDGED in line for line in failures)
    assert any("the divergence is in the torch patching, not the export" in f for f in failures)
    text = report.format()
    assert f"first divergence vs reference: {NUDGED} (Linear patched, Linear in the reference)" in (
        text
    )
    assert "the divergence is in the torch patching, not the export" in text
    # The same in JSON.
    data = json.loads(report.to_json())
    assert data["passed"] is False and data["diverges_in"] == IN_PATCHING
    assert data["reference_first_divergence"] == NUDGED
    by_name = {a["name"]: a for a in data["agreement"]}
    assert by_name[TORCH_VS_REFERENCE]["status"] == FAIL
    assert by_name[TORCH_VS_REFERENCE]["failed"] == by_name[TORCH_VS_REFERENCE]["runs"] == 5
    assert by_name[ONNX_VS_TORCH]["max_abs_err"] < 1e-5
    assert by_name[TORCH_VS_REFERENCE]["max_abs_err"] > 1e-3


def test_reference_agrees_but_onnx_does_not_blames_the_export():
    model, args = _net()
    reference = copy.deepcopy(model)

    def factory(model_bytes, level):
        return _Shifted(default_session_factory(model_bytes, level), 1e-3)

    report = opbridge.verify(
        model, args, route="standard", reference=reference, session_factory=factory, **ONE_LEVEL
    )

    assert not report.passed
    assert _agreement(report) == {
        ONNX_VS_TORCH: FAIL,
        TORCH_VS_REFERENCE: PASS,
        ONNX_VS_REFERENCE: FAIL,
    }
    assert report.diverges_in == IN_EXPORT
    assert report.reference_first_divergence is None
    assert any("the divergence is in the export/runtime" in f for f in report.failures())


def test_reference_with_opbridge_patch():
    """The documented use: keep a copy, patch, verify against the copy."""
    torch.manual_seed(0)
    model = MlpNet().eval()
    reference = copy.deepcopy(model)
    opbridge.patch(model)
    args = (torch.randn(2, 4, 8),)

    report = opbridge.verify(model, args, route="custom", reference=reference, **ONE_LEVEL)

    assert report.passed, report.format()
    layers = {r.module: r for r in report.reference_layers}
    assert layers["norm"].patched_type == "opbridge.nn.LayerNorm"
    assert layers["norm"].reference_type == "LayerNorm" and layers["norm"].status == PASS
    # The Linear lost its bias to the BiasGELU after it: compared there, not a divergence.
    assert layers["mlp.0"].status == NOT_APPLICABLE
    assert "moved its parameter 'bias' to mlp.1" in layers["mlp.0"].detail
    assert layers["mlp.1"].status == PASS and layers["mlp.1"].patched_type.endswith("BiasGELU")

    _nudge(model, "mlp.2")
    report = opbridge.verify(model, args, route="custom", reference=reference, **ONE_LEVEL)
    assert not report.passed and report.diverges_in == IN_PATCHING
    assert report.reference_first_divergence == "mlp.2"


def test_reference_difference_inside_an_agreeing_module_is_a_warning():
    torch.manual_seed(0)
    reference = Pair(1.0, 1.0).eval()
    model = Pair(2.0, 0.5).eval()
    model.load_state_dict(reference.state_dict())

    report = opbridge.verify(
        model, (torch.randn(2, 8),), route="standard", reference=reference, **ONE_LEVEL
    )

    assert report.passed, report.format()
    layers = {r.module: r for r in report.reference_layers}
    assert layers["a"].status == WARN
    assert "differs, but the model's outputs agree" in layers["a"].detail
    assert layers["b"].status == layers["fc"].status == PASS


class _OnlyBatchTwo(Net):
    def forward(self, x):
        if x.shape[0] != 2:
            raise RuntimeError("this model runs at batch 2 only")
        return super().forward(x)


def test_reference_that_fails_on_some_cases():
    model, args = _net()
    reference = _OnlyBatchTwo().eval()
    reference.load_state_dict(model.state_dict())

    report = opbridge.verify(
        model, args, route="standard", reference=reference, layers=False, **ONE_LEVEL
    )

    assert not report.passed
    assert [r.status for r in report.reference_runs] == [PASS, PASS, PASS, FAIL, FAIL]
    assert report.diverges_in == IN_PATCHING
    # ONNX Runtime is compared with the reference only where the reference ran.
    assert [c.reference_status for c in report.cells] == [PASS, PASS, PASS, None, None]
    assert (
        "reference, batch 1 and 1 more: the reference model failed: RuntimeError: this model "
        "runs at batch 2 only (x2)"
    ) in report.failures()


def test_reference_arguments_are_checked():
    model, args = _net()
    with pytest.raises(TypeError, match=r"verify: reference must be a torch.nn.Module .* got dict"):
        opbridge.verify(model, args, route="standard", reference={"weights": 1})
    with pytest.raises(ValueError, match=r"reference is the verified model itself.*deepcopy"):
        opbridge.verify(model, args, route="standard", reference=model)


# ---------------------------------------------------------------- shapes


def test_dynamic_sequence_exports_and_sweeps_a_longer_sequence():
    torch.manual_seed(0)
    model = Tokens().eval()
    ids = torch.randint(2, 9, (2, 6))
    args = (ids, torch.ones(2, 6))
    feeds = []

    def factory(model_bytes, level):
        return _Feeds(default_session_factory(model_bytes, level), feeds)

    report = opbridge.verify(
        model,
        args,
        route="standard",
        dynamic_sequence=True,
        session_factory=factory,
        layers=False,
        draws=2,
        **ONE_LEVEL,
    )

    assert report.passed, report.format()
    for graph_input in report.onnx_model.graph.input:
        batch, sequence = graph_input.type.tensor_type.shape.dim
        assert batch.dim_param and sequence.dim_param, graph_input
    assert report.dynamic_batch and report.dynamic_sequence
    assert report.shapes.startswith("dynamic batch, dynamic sequence")
    assert report.sequence_sweep == "ran: 6, 12"
    assert [(c.case, c.batch) for c in report.cells] == [
        ("example", 2),
        ("draw 1", 2),
        ("sequence 12", 2),
        ("batch 1", 1),
        ("batch 16", 16),
    ]
    # The longer sequence ran, ids and mask alike; random ids stay within the example's range.
    ran = {tuple(f["ids"].shape) for f in feeds}
    assert (2, 12) in ran
    assert all(f["mask"].shape == f["ids"].shape for f in feeds)
    assert all(f["ids"].min() >= 2 and f["ids"].max() <= 8 for f in feeds)


def test_sequence_lengths_given_and_checked():
    torch.manual_seed(0)
    model = Tokens().eval()
    args = (torch.randint(0, 11, (2, 4)), torch.ones(2, 4))
    report = opbridge.verify(
        model,
        args,
        route="standard",
        dynamic_sequence=True,
        sequence_lengths=[3, 4, 9],
        layers=False,
        draws=1,
        batch_sizes=[2],
        **ONE_LEVEL,
    )
    assert report.passed, report.format()
    assert report.sequence_sweep == "ran: 3, 4, 9"
    assert [c.case for c in report.cells] == ["example", "sequence 3", "sequence 9"]
    with pytest.raises(ValueError, match=r"sequence_lengths must be positive integers, got \[0\]"):
        opbridge.verify(model, args, route="standard", sequence_lengths=[0])
    with pytest.raises(TypeError, match=r"pass dynamic_shapes or dynamic_sequence=True, not both"):
        opbridge.verify(model, args, route="standard", dynamic_sequence=True, dynamic_shapes={})


def test_dynamic_sequence_the_exporter_fixes_is_reported_static():
    """Dimension 1 of a [batch, features] input cannot be dynamic: the
    exporter fixes it (or the export falls back to a dynamic batch), and the
    report says the sequence is static."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4).eval()

    report = opbridge.verify(
        model, (torch.randn(2, 8),), route="standard", dynamic_sequence=True, **ONE_LEVEL
    )

    assert report.passed, report.format()
    dims = report.onnx_model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_value == 8
    assert report.dynamic_batch and not report.dynamic_sequence
    assert report.shapes.startswith("dynamic batch, static sequence")
    assert report.sequence_sweep.startswith("not applicable")
    assert any("a dynamic sequence was asked for" in w for w in report.warnings)


def test_static_graph_is_never_called_dynamic(monkeypatch):
    """An exporter that fixes every dimension, though a dynamic batch and
    sequence were asked for: the report reads the graph."""
    from opbridge.verify import core

    export = core.export_onnx

    def static_export(model, args, **options):
        options.pop("dynamic_batch", None)
        options.pop("dynamic_shapes", None)
        return export(model, args, **options)

    monkeypatch.setattr(core, "export_onnx", static_export)
    model, args = _net()

    report = opbridge.verify(model, args, route="standard", dynamic_sequence=True, **ONE_LEVEL)

    assert report.passed, report.format()
    dims = report.onnx_model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, 8]
    assert not report.dynamic_batch and not report.dynamic_sequence
    assert report.shapes == "static batch, static sequence (graph inputs: x [2, 3, 8])"
    assert "dynamic" not in report.model_source
    assert report.batch_sweep.startswith("not applicable")
    assert report.sequence_sweep.startswith("not applicable")
    assert [w.split(":")[0] for w in report.warnings] == [
        "a dynamic batch was asked for, but the exported graph's inputs fix it",
        "a dynamic sequence was asked for, but the exported graph's inputs fix it",
    ]
    text = report.format()
    assert "shapes: static batch, static sequence" in text
    assert "WARNING: a dynamic batch was asked for" in text
    data = json.loads(report.to_json())
    assert data["dynamic_batch"] is False and data["dynamic_sequence"] is False


def test_static_export_asked_for_reports_static():
    model, args = _net()
    report = opbridge.verify(model, args, route="standard", dynamic_batch=False, **ONE_LEVEL)
    assert report.shapes.startswith("static batch, static sequence")
    assert report.warnings == []


def test_example_batch_of_one_warns():
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(1, 3, 8)

    with pytest.warns(UserWarning, match=r"verify: the example inputs have batch 1; an export at"):
        report = opbridge.verify(model, (x,), route="standard", layers=False, draws=1, **ONE_LEVEL)

    assert any(w.startswith("the example inputs have batch 1") for w in report.warnings)
    assert "WARNING: the example inputs have batch 1" in report.format()
    # No warning at batch 2, nor for a batch 1 that is static by choice.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*example inputs have batch 1")
        quick = {"layers": False, "draws": 1, "batch_sizes": [2], **ONE_LEVEL}
        opbridge.verify(model, (torch.randn(2, 3, 8),), route="standard", **quick)
        report = opbridge.verify(model, (x,), route="standard", dynamic_batch=False, **quick)
    assert report.warnings == []


# ---------------------------------------------------------------- repeated errors


def test_repeated_run_errors_are_counted_once():
    model, args = _net()

    def factory(model_bytes, level):
        return _Crashing(default_session_factory(model_bytes, level))

    report = opbridge.verify(
        model, args, route="standard", session_factory=factory, levels=["disable_all", "enable_all"]
    )

    assert not report.passed
    crashed = [c for c in report.cells if c.error]
    assert len(crashed) == 10  # 5 cases at 2 levels
    failures = report.failures()
    message = "RuntimeError: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : out of arena memory"
    runs = [line for line in failures if line.startswith("run ")]
    assert runs == [f"run example at disable_all and 9 more: {message} (x10)"]
    # Layer by layer failed the same way on each of the 5 cases: one line too.
    assert report.errors == [
        f"layer by layer, example at disable_all and 4 more: ONNX Runtime failed: {message} (x5)"
    ]
    assert sum("out of arena memory" in line for line in failures) == 2
    assert report.format().count("out of arena memory") == 2


def test_different_errors_stay_separate():
    model, args = _net()

    class Numbered(_Crashing):
        calls = 0

        def run(self, names, feed):
            Numbered.calls += 1
            raise RuntimeError(f"failure {Numbered.calls % 2}")

    def factory(model_bytes, level):
        return Numbered(default_session_factory(model_bytes, level))

    report = opbridge.verify(
        model, args, route="standard", session_factory=factory, layers=False, **ONE_LEVEL
    )

    runs = [line for line in report.failures() if line.startswith("run ")]
    assert runs == [
        "run example at disable_all and 2 more: RuntimeError: failure 1 (x3)",
        "run draw 1 at disable_all and 1 more: RuntimeError: failure 0 (x2)",
    ]


# ---------------------------------------------------------------- CLI

FACTORIES = """
import torch
from torch import nn

import opbridge


class MlpNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        return self.mlp(self.norm(x))


def make_model():
    # Random weights from the global generator: the same only under the same seed.
    return MlpNet().eval(), (torch.randn(2, 4, 8),)


def make_patched_model():
    model, args = make_model()
    return opbridge.patch(model), args


def make_nudged_model():
    model, args = make_patched_model()
    with torch.no_grad():
        model.mlp[2].weight[0, 0] += 1e-2
    return model, args


def make_other_inputs():
    model, _ = make_model()
    return model, (torch.randn(2, 5, 8),)
"""


@pytest.fixture
def factories(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(FACTORIES)
    return path


def test_cli_reference_end_to_end(factories):
    options = ["--route", "custom", "--levels", "disable_all", "--draws", "1"]
    result = subprocess.run(
        [
            sys.executable, "-m", "opbridge", "verify", f"{factories}:make_nudged_model",
            "--reference", f"{factories}:make_model", *options,
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip

    assert result.returncode == 1, result.stderr[-2000:]
    out = result.stdout
    source = f"{factories}:make_model, a MlpNet built with seed 0"
    assert f"Against the reference model ({source})" in out
    assert "the divergence is in the torch patching, not the export" in out
    assert "first divergence vs reference: mlp.2 (Linear patched, Linear in the reference)" in out


def test_cli_reference_dynamic_sequence_json(factories, capsys):
    options = ["--route", "custom", "--levels", "disable_all", "--draws", "1", "--json"]
    status = main(
        [
            "verify", f"{factories}:make_patched_model", "--reference", f"{factories}:make_model",
            "--dynamic-sequence", "--batch-sizes", "2", *options,
        ]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)

    assert status == 0, data["failures"]
    # Built under the same seed, the reference has the patched model's weights.
    assert {a["name"]: a["status"] for a in data["agreement"]} == {
        ONNX_VS_TORCH: PASS,
        TORCH_VS_REFERENCE: PASS,
        ONNX_VS_REFERENCE: PASS,
    }
    assert data["dynamic_sequence"] is True and data["sequence_sweep"] == "ran: 4, 8"
    assert [r["case"] for r in data["reference_runs"]] == ["example", "sequence 8"]
    assert data["diverges_in"] is None


def test_cli_reference_errors(factories, capsys):
    route = ["--route", "standard"]
    assert main(["verify", f"{factories}:make_model", "--reference", "nope", *route]) == 2
    assert "--reference: expected 'path/to/file.py:function'" in capsys.readouterr().err
    reference = f"{factories}:make_other_inputs"
    assert main(["verify", f"{factories}:make_model", "--reference", reference, *route]) == 2
    err = capsys.readouterr().err
    assert f"--reference: '{reference}' returned example inputs ['float32[2, 5, 8]']" in err
    assert "expected the model's" in err and "['float32[2, 4, 8]']" in err


def test_onnx_dims_helper_reads_dim_param():
    """The dims the report reads: a named dimension is dynamic, a size is not."""
    from opbridge.verify.structure import dynamic_axes, io_info, shapes_line

    value = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 7, "seq"])
    info = io_info(value)
    assert info["dynamic_dims"] == [0, 2]
    assert dynamic_axes([info]) == (True, False)
    assert shapes_line([info]) == "dynamic batch, static sequence (graph inputs: x [batch, 7, seq])"
