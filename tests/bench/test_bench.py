"""The benchmark runs end to end in its quick mode (tiny sizes, few calls).
Timings on a shared machine mean nothing here: only the output's form is
checked."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys

import pytest
import torch

import opbridge
from opbridge import bench
from opbridge.__main__ import main
from opbridge.ops import _card, cards, register_card

from paths import ROOT

KEYS = {"op", "shape", "dtype", "threads", "pass", "impl", "median_us", "p99_us", "gbps"}


def test_quick_benchmark_writes_json_table_and_plot(tmp_path, capsys, monkeypatch):
    # The built-in operators only: a card another test file registered in
    # this process (a guide's) is not this test's.
    monkeypatch.setattr(_card, "_REGISTERED", {})
    out, png, md = tmp_path / "bench.json", tmp_path / "bench.png", tmp_path / "bench.md"
    # One size and one thread count: every op, implementation and pass still
    # runs; torch.compile (inductor compiles each op anew: seconds apiece)
    # on one op, in a second run.
    argv = ["bench", "--quick", "--sizes", "small", "--threads", "1"]
    others = [impl for impl in bench.IMPLS if impl != "torch_compile"]
    files = ["--json", str(out), "--plot", str(png), "--markdown", str(md)]
    assert main([*argv, "--impls", *others, *files]) == 0
    report = json.loads(out.read_text())
    assert report["copy_gbps"] > 0
    results = report["results"]
    compiled = tmp_path / "compiled.json"
    one_op = ["--ops", "scaled_clamp", "--no-model", "--impls", "torch_compile"]
    assert main([*argv, *one_op, "--json", str(compiled)]) == 0
    compiled_rows = json.loads(compiled.read_text())["results"]
    assert {(r["op"], r["impl"], r["pass"]) for r in compiled_rows} == {
        ("scaled_clamp", "torch_compile", "fwd"),
        ("scaled_clamp", "torch_compile", "fwd+bwd"),
    }
    results += compiled_rows
    assert all(set(r) >= KEYS for r in results)
    # opbridge_compile and opbridge_compile_auto time the end-to-end models
    # only, transformers' own exports (ort_hf_fusions, ort_hf) hf_llama only.
    assert {r["impl"] for r in results} == set(bench.IMPLS) - set(bench.MODEL_IMPLS) - set(
        bench.HF_IMPLS
    )
    assert {r["op"] for r in results} == set(opbridge.specs()) | {"demo_model"}
    # No PyTorch built-in exists for some (rotary_embedding, normalize_image):
    # their rows have no torch_builtin.
    for card in cards().values():
        impls = {r["impl"] for r in results if r["op"] == card.name}
        assert ("torch_builtin" in impls) == (card.builtin is not None), card.name
    assert {r["pass"] for r in results} == {"fwd", "fwd+bwd"}
    assert {r["threads"] for r in results} >= {1}
    # ONNX Runtime has no backward here: only PyTorch implementations time fwd+bwd.
    assert {r["impl"] for r in results if r["pass"] == "fwd+bwd"} == set(bench.TORCH_IMPLS)
    assert all(r["median_us"] > 0 and r["p99_us"] >= r["median_us"] for r in results)
    assert png.stat().st_size > 0
    table = md.read_text()
    assert "| rms_norm | 1x64 | float32 | 1 | fwd |" in table
    assert "opbridge_torch" in capsys.readouterr().out


@pytest.fixture
def registry(monkeypatch):
    """Cards registered during a test are gone after it."""
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))


def test_operator_of_another_library_by_import(registry, tmp_path, capsys):
    # Registers on first import; a later test in the same process re-registers.
    register_card(importlib.import_module("user_op_card").CARD)
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--import", "user_op_card", "--sizes", "small", "--threads", "1"]
    argv += ["--ops", "myops::shifted_relu", "scaled_clamp", "--no-model", "--json", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert all(set(r) >= KEYS for r in results)
    assert {r["op"] for r in results} == {"myops::shifted_relu", "scaled_clamp"}
    user = [r for r in results if r["op"] == "myops::shifted_relu"]
    # A torch.library op of its own, not built by opbridge: no out= form.
    assert "opbridge_torch_out" not in {r["impl"] for r in user}
    assert {r["impl"] for r in user if r["pass"] == "fwd"} >= {
        "opbridge_torch",
        "torch_composite",
        "torch_builtin",
        "torch_compile",
    }
    assert {r["impl"] for r in user if r["pass"] == "fwd+bwd"} == set(bench.TORCH_IMPLS)
    text = capsys.readouterr().out
    if not {r["impl"] for r in user} & set(bench.ORT_IMPLS):
        assert "myops::shifted_relu: no ONNX export by the standard route" in text
        assert "Torch IR graph" not in text
    # The built-in op alongside still has its ONNX Runtime rows.
    assert {r["impl"] for r in results if r["op"] == "scaled_clamp"} == set(bench.IMPLS) - set(
        bench.MODEL_IMPLS
    ) - set(bench.HF_IMPLS)


def test_unknown_operator_is_named(capsys):
    assert main(["bench", "--quick", "--ops", "myops::missing"]) == 2
    err = capsys.readouterr().err
    assert "unknown op 'myops::missing'" in err and "--import" in err


def test_operator_of_another_library_with_an_onnx_symbolic(registry, tmp_path):
    """Once the legacy exporter knows the op (here: through its card's
    standard decomposition), its ONNX Runtime rows are timed too."""
    from torch.onnx import symbolic_helper

    from opbridge.export.builder import LegacyBuilder

    card = register_card(importlib.import_module("user_op_card").CARD)

    @symbolic_helper.parse_args("v", "f")
    def symbolic(g, x, shift):
        return card.standard(LegacyBuilder(g, 18), x, shift=shift)

    torch.onnx.register_custom_op_symbolic(card.qualified_name, symbolic, 18)
    try:
        out = tmp_path / "bench.json"
        argv = ["bench", "--quick", "--sizes", "small", "--threads", "1", "--no-backward"]
        argv += ["--ops", "myops::shifted_relu", "--no-model", "--json", str(out)]
        argv += ["--impls", "opbridge_torch", "ort_standard"]
        assert main(argv) == 0
    finally:
        torch.onnx.unregister_custom_op_symbolic(card.qualified_name, 18)
    results = json.loads(out.read_text())["results"]
    assert {(r["op"], r["impl"]) for r in results} == {
        ("myops::shifted_relu", "opbridge_torch"),
        ("myops::shifted_relu", "ort_standard"),
    }


MODEL_IMPLS = {
    "torch_composite",
    "opbridge_torch",
    "ort_standard",
    "ort_standard_nofusion",
    "ort_custom",
    "ort_contrib",
    "ort_fused",
    "ort_function",
    "ov_custom",
    "ov_standard",
    "ov_fused",
    "ov_function",
}


def test_quick_end_to_end_models(tmp_path, capsys):
    """``--models`` alone runs only the end-to-end models (toy sizes with
    --quick, where torch.compile is left out: compiling them takes about a
    minute), each implementation's output checked against opbridge_torch.
    The opbridge_compile rows have a test of their own (test_compile.py)."""
    out, md = tmp_path / "models.json", tmp_path / "models.md"
    argv = ["bench", "--quick", "--models", "--threads", "1", "--json", str(out)]
    argv += ["--impls", *(i for i in bench.IMPLS if i not in bench.MODEL_IMPLS)]
    assert main([*argv, "--markdown", str(md)]) == 0
    report = json.loads(out.read_text())
    results = report["results"]
    assert all(set(r) >= KEYS | {"max_abs_diff"} for r in results)
    # hf_llama runs only when named.
    assert {r["op"] for r in results} == set(bench.models.DEFAULT_MODELS)
    for name in bench.models.DEFAULT_MODELS:
        rows = {r["impl"]: r for r in results if r["op"] == name}
        assert set(rows) == MODEL_IMPLS, name
        assert all(r["median_us"] > 0 and r["p99_us"] >= r["median_us"] for r in rows.values())
        assert all(r["max_abs_diff"] < 1e-3 for r in rows.values()), name
        # ONNX Runtime's own operators in the model each ran, "none" when none.
        assert isinstance(rows["ort_contrib"]["fused"], list)
        assert isinstance(rows["ort_fused"]["fused"], list)
        assert "fused" not in rows["ort_custom"]
        assert set(report["models"]) == set(bench.models.DEFAULT_MODELS)
    # The ort route emits ONNX Runtime's fused operators for the LLaMA-style blocks.
    llama = {r["impl"]: r for r in results if r["op"] == "llama_prefill"}
    assert "SkipSimplifiedLayerNormalization" in llama["ort_fused"]["fused"]
    profiles = {(p["op"], p["impl"]): p for p in report["profiles"]}
    assert set(profiles) == {
        (name, impl)
        for name in bench.models.DEFAULT_MODELS
        for impl in ("opbridge_torch", "ort_custom")
    }
    for p in profiles.values():
        assert p["opbridge_pct"] > 0
        assert abs(p["opbridge_pct"] + p["matmul_pct"] + p["other_pct"] - 100) < 1e-6
    table = md.read_text()
    assert "Load average" in table
    assert "| llama_decode | 2x4x64 float32 | 1 | ort_contrib |" in table
    assert "llama_prefill ort_custom 1t: opbridge ops" in table
    assert "no KV cache" in table
    assert "torch_compile: left out at --quick sizes" in capsys.readouterr().out


def test_quick_hf_llama_beside_transformers_export(tmp_path, capsys):
    """``--models hf_llama``: a transformers Llama with grouped-query
    attention, exported by transformers' own exporter with ONNX Runtime's
    fusions (ort_hf_fusions, the anchor) beside the opbridge.patch-ed copy
    by opbridge's routes through the same exporter, each output checked
    against transformers' logits in torch."""
    pytest.importorskip("transformers.exporters")
    out, md = tmp_path / "hf.json", tmp_path / "hf.md"
    impls = ["torch_composite", "opbridge_torch", "ort_hf_fusions", "ort_custom", "ort_fused"]
    argv = ["bench", "--quick", "--models", "hf_llama", "--threads", "1", "--impls", *impls]
    assert main([*argv, "--json", str(out), "--markdown", str(md)]) == 0
    report = json.loads(out.read_text())
    rows = {r["impl"]: r for r in report["results"]}
    assert {r["op"] for r in report["results"]} == {"hf_llama"}
    assert set(rows) == set(impls)
    assert all(r["shape"] == [1, 16] and r["dtype"] == "int64" for r in rows.values())
    assert all(r["median_us"] > 0 and r["p99_us"] >= r["median_us"] for r in rows.values())
    assert all(r["max_abs_diff"] <= 1e-4 for r in rows.values()), rows
    # transformers' fusions put grouped-query attention into one ONNX Runtime
    # operator; the custom route has opbridge's operators instead.
    assert "GroupQueryAttention" in rows["ort_hf_fusions"]["fused"]
    assert "SkipSimplifiedLayerNormalization" in rows["ort_fused"]["fused"]
    table = md.read_text()
    assert "| hf_llama | 1x16 int64 | 1 | ort_hf_fusions |" in table
    assert "| hf_llama | 1x16 int64 | 1 | ort_custom |" in table
    assert "grouped-query attention" in table
    assert "hf_llama ort_custom 1t: opbridge ops" in table


def test_hf_llama_without_transformers_is_refused(monkeypatch, capsys):
    """Without transformers, ``--models hf_llama`` stops before any timing
    with a message that names what is missing."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert main(["bench", "--quick", "--models", "hf_llama"]) == 2
    err = capsys.readouterr().err
    assert "hf_llama model needs transformers" in err and "transformers.exporters" in err
    with pytest.raises(ValueError, match="needs transformers"):
        bench.models.build_cases(["hf_llama"], quick=True)


def test_half_types_are_timed_in_both_runtimes(tmp_path):
    # bfloat16 has no NumPy type: ONNX Runtime gets it through IO binding
    out = tmp_path / "half.json"
    argv = ["bench", "--quick", "--ops", "rms_norm", "--dtypes", "float16", "bfloat16"]
    argv += ["--threads", "1", "--no-backward", "--no-model", "--json", str(out)]
    argv += ["--impls", "opbridge_torch", "ort_custom"]
    assert main(argv) == 0
    timed = {(r["dtype"], r["impl"]) for r in json.loads(out.read_text())["results"]}
    assert timed == {
        (dtype, impl)
        for dtype in ("float16", "bfloat16")
        for impl in ("opbridge_torch", "ort_custom")
    }


def test_composite_twin_runs_without_opbridge_operators():
    from opbridge.bench import models as bench_models

    (case,) = bench_models.build_cases(["llama_decode"], quick=True)
    twin = bench_models.composite_twin(case.model)
    # Every opbridge module is only the source of a Composite (for its parameters).
    held = {id(m.source) for m in twin.modules() if isinstance(m, bench_models.Composite)}
    ours = [m for m in twin.modules() if type(m) in bench_models.COMPOSITE_ARGUMENTS]
    assert ours and all(id(m) in held for m in ours)
    # Parameters are shared, not copied.
    assert {id(p) for p in twin.parameters()} == {id(p) for p in case.model.parameters()}
    with torch.no_grad():
        torch.testing.assert_close(twin(*case.inputs), case.model(*case.inputs))
        profile = bench_models.torch_profile(lambda: twin(*case.inputs), calls=1)
    assert profile.opbridge_pct == 0


def test_contrib_rewrite_names_the_fused_operators():
    """At the contrib export's opset the standard route's bias_gelu is Add +
    Gelu, which onnxscript's rule rewrites into com.microsoft BiasGelu; the
    rms_norm chain (Div, not Reciprocal) matches no rule."""
    import onnx

    found = {}
    for name in ("bias_gelu", "rms_norm"):
        case = bench.OpCase(name)
        args = case.inputs([4, 64], torch.float32)
        model = bench.export_onnx(case.module(args), bench.tensors_of(args), route="contrib")
        found[name] = bench.models.contrib_ops(onnx.load_from_string(model))
    assert found == {"bias_gelu": ["BiasGelu"], "rms_norm": []}


def _targets_module():
    path = ROOT / "benchmarks" / "targets.py"
    spec = importlib.util.spec_from_file_location("bench_targets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_targets_are_read_from_the_largest_shape_and_judged_by_ratio():
    def result(op, shape, pass_, impl, us, threads=2):
        nbytes = 8 * 4096 * shape[0]
        return {
            "op": op,
            "shape": shape,
            "dtype": "float32",
            "threads": threads,
            "pass": pass_,
            "impl": impl,
            "median_us": us,
            "p99_us": us,
            "gbps": nbytes / us / 1e3,
        }

    report = {
        "copy_gbps": 10.0,
        "results": [
            # the cache size would meet everything; only the DRAM one counts
            result("my_op", [64, 4096], "fwd", "opbridge_torch", 1.0),
            result("my_op", [64, 4096], "fwd", "torch_compile", 9.0),
            result("my_op", [2048, 4096], "fwd", "opbridge_torch", 100.0),
            result("my_op", [2048, 4096], "fwd", "torch_compile", 90.0),
            result("my_op", [2048, 4096], "fwd", "ort_custom", 100.0),
            result("my_op", [2048, 4096], "fwd", "ort_standard", 300.0),
            result("my_op", [2048, 4096], "fwd", "ort_contrib", 120.0),
            result("my_op", [2048, 4096], "fwd+bwd", "opbridge_torch", 100.0),
            result("my_op", [2048, 4096], "fwd+bwd", "torch_builtin", 140.0),
            result("my_op", [2048, 4096], "fwd", "torch_compile", 1.0, threads=1),
            result("llama_decode", [8, 16, 1024], "fwd", "ort_custom", 10.0),
            result("llama_decode", [8, 16, 1024], "fwd", "ort_fused", 11.0),
            result("llama_decode", [8, 16, 1024], "fwd", "ort_standard", 9.0),
        ],
    }
    got = {
        target: (measured, met) for target, _, measured, met in _targets_module().rows(report, 2)
    }
    assert got["my_op 2048x4096 fwd: opbridge_torch vs torch_compile"] == ("0.90x", False)
    assert got["my_op 2048x4096 fwd: ort_custom vs the better ORT anchor (ort_contrib)"] == (
        "1.20x",
        True,
    )
    # 8 * 4096 * 2048 bytes in 100 us is 671 GB/s against a copy of 10 GB/s
    assert got["my_op 2048x4096 fwd: opbridge_torch share of copy bandwidth"][1] is True
    assert got["my_op 2048x4096 fwd+bwd: opbridge_torch vs torch_builtin"] == ("1.40x", False)
    assert got["llama_decode: ort_custom vs the fastest other (ort_standard)"] == ("0.90x", False)
    assert not any(target.startswith("my_op 64x4096") for target in got)


def test_min_bytes_counts_every_input_that_takes_a_gradient():
    case = bench.OpCase("add_rms_norm")  # (x, residual, weight) -> (y, x + residual)
    rows, cols = 4, 64
    x, weight = rows * cols * 4, cols * 4
    fwd = 2 * x + weight + 2 * x
    assert case.min_bytes(case.inputs([rows, cols], torch.float32), "fwd") == fwd
    args = case.inputs([rows, cols], torch.float32, requires_grad=True)
    # Both outputs' gradients read; x, residual and weight read again and
    # their gradients written.
    assert case.min_bytes(args, "fwd+bwd") == fwd + 2 * x + 2 * (2 * x + weight)


def test_max_abs_diff_takes_bfloat16_and_onnx_runtime_arrays():
    import numpy as np

    from opbridge.bench.runner import max_abs_diff

    expected = torch.tensor([1.0, 2.0, -3.0], dtype=torch.bfloat16)
    got = torch.tensor([1.0, 2.5, -3.0], dtype=torch.bfloat16)
    assert max_abs_diff(got, expected) == 0.5
    assert max_abs_diff((got.requires_grad_(),), expected) == 0.5
    assert max_abs_diff([np.array([1.0, 2.0, -2.0], dtype=np.float32)], expected) == 1.0


def _bench_args(*argv):
    import argparse

    from opbridge.cli import bench as bench_cli

    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    return bench_cli, parser.parse_args(list(argv))


def test_ops_run_alone_unless_models_are_asked_for(tmp_path):
    """``--ops`` times those ops only: no demo model and no end-to-end
    models, in a full run too, unless ``--models`` names them."""
    cli, args = _bench_args("--ops", "scaled_clamp")
    assert cli.end_to_end_models(args) == [] and not cli.runs_demo_model(args)
    cli, args = _bench_args("--ops", "scaled_clamp", "--models", "vision")
    assert cli.end_to_end_models(args) == ["vision"] and not cli.runs_demo_model(args)
    cli, args = _bench_args()
    assert cli.end_to_end_models(args) == list(bench.models.DEFAULT_MODELS)
    assert cli.runs_demo_model(args)
    out = tmp_path / "ops.json"
    argv = ["bench", "--quick", "--ops", "scaled_clamp", "--sizes", "small", "--threads", "1"]
    argv += ["--impls", "opbridge_torch", "--no-backward", "--json", str(out)]
    assert main(argv) == 0
    assert {r["op"] for r in json.loads(out.read_text())["results"]} == {"scaled_clamp"}


def test_torch_compile_is_compiled_and_warmed_before_its_timed_calls(monkeypatch):
    """Every pass compiles torch.compile's callable (its forward, and its
    backward on the first fwd+bwd call) before the timed calls, even with
    no warm-up asked for: no timed call compiles, so a row's figure does
    not depend on what ran before it."""
    from opbridge.bench import runner

    passes = []

    def counting(fn, warmup, iters, budget_s):
        compiled = []

        def call():
            before = bench.compilations()
            fn()
            compiled.append(bench.compilations() - before)

        times = bench.time_calls(call, warmup, iters, budget_s)
        passes.append((compiled, len(times)))
        return times

    monkeypatch.setattr(runner, "time_calls", counting)
    settings = bench.Settings(
        thread_counts=[1],
        dtypes=["float32"],
        ops=["scaled_clamp"],
        sizes={"small": [1, 64]},
        model_sizes={},
        warmup=0,
        iters=3,
        budget_s=0.0,
        backward=True,
        impls=["torch_compile"],
    )
    results = bench.run_benchmark(settings, log=lambda line: None)["results"]
    assert [(r["impl"], r["pass"]) for r in results] == [
        ("torch_compile", "fwd"),
        ("torch_compile", "fwd+bwd"),
    ]
    assert len(passes) == 2
    for compiled, timed in passes:
        assert timed == 3 and compiled[-timed:] == [0] * timed, compiled
        # Each pass compiles afresh, in its untimed calls.
        assert sum(compiled) > 0, compiled


def test_time_call_times_an_op_as_the_bench_does():
    x = torch.randn(4, 64, requires_grad=True)
    compiled = torch.compile(lambda x: torch.sin(2 * x), dynamic=False)
    before = torch.get_num_threads()
    timing = bench.time_call(compiled, x, backward=True, warmup=0, iters=4, budget_s=0, threads=1)
    assert len(timing.times_us) == 4 and 0 < timing.median_us <= timing.p99_us
    assert timing.allocator != "default" and torch.get_num_threads() == before
    assert x.grad is not None
    fwd = bench.time_call(torch.ops.opbridge.scaled_clamp, x, 2.0, -1.0, 1.0, iters=2, budget_s=0)
    assert len(fwd.times_us) == 2 and "median" in str(fwd)
    with pytest.raises(ValueError, match="no tensor argument requires grad"):
        bench.time_call(compiled, x.detach(), backward=True)
