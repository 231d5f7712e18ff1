"""benchmarks/user_ops.py runs in its quick mode. Building a user's library
takes a minute, so the test times one of opbridge's own operators through
the same code path (card, implementations, rounds, copy, verdicts), without
torch.compile (seconds per compilation; tests/bench/test_bench.py times it);
the verdicts against it are checked on a report made up here. Timings mean
nothing in a test: only the report's form is checked."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch

from paths import ROOT


@pytest.fixture(scope="module")
def user_ops():
    path = ROOT / "benchmarks" / "user_ops.py"
    spec = importlib.util.spec_from_file_location("bench_user_ops", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_quick_run_times_every_implementation_and_judges_the_targets(user_ops, tmp_path, capsys):
    out, md = tmp_path / "user_ops.json", tmp_path / "user_ops.md"
    threads = torch.get_num_threads()
    argv = ["--quick", "--ops", "scaled_clamp", "--threads", "1", "--sizes", "dram"]
    impls = [impl for impl in user_ops.IMPLS if impl != "torch_compile"]
    argv += ["--impls", *impls, "--json", str(out), "--markdown", str(md)]
    assert user_ops.main(argv) == 0
    assert torch.get_num_threads() == threads
    report = json.loads(out.read_text())
    results = report["results"]
    assert {(r["impl"], r["pass"]) for r in results} == {
        *((impl, "fwd") for impl in impls),
        *((impl, "fwd+bwd") for impl in ("torch_composite", "opbridge_torch", "copy")),
    }
    assert all(r["op"] == "scaled_clamp" and r["shape"] == [64, 256] for r in results)
    assert all(r["median_us"] > 0 and r["p99_us"] >= r["median_us"] for r in results)
    # Every forward output is compared with the operator's (scaled_clamp: exact).
    fwd = [r for r in results if r["pass"] == "fwd" and r["impl"] != "copy"]
    assert all(r["max_abs_diff"] < 1e-5 for r in fwd)
    (verdict,) = report["verdicts"]
    assert (verdict["target"], verdict["goal"]) == (
        "fwd: opbridge_torch share of copy bandwidth",
        0.75,
    )
    by_impl = {r["impl"]: r for r in results if r["pass"] == "fwd"}
    share = by_impl["copy"]["median_us"] / by_impl["opbridge_torch"]["median_us"]
    assert verdict["measured"] == pytest.approx(share) and verdict["met"] == (share >= 0.75)
    table = md.read_text()
    assert "| scaled_clamp | 64x256 | float32 | 1 | fwd |" in table
    assert "share of copy bandwidth | >= 75%" in table
    assert "opbridge_torch" in capsys.readouterr().out


def test_an_operator_that_is_not_there_is_named_and_skipped(user_ops, capsys):
    report = user_ops.run(user_ops.parser().parse_args(["--quick", "--ops", "myops::missing"]))
    assert report["results"] == [] and report["verdicts"] == []
    assert report["not_found"][0].startswith("myops::missing: op not found")
    assert "myops::missing: op not found" in capsys.readouterr().out


def test_verdicts_are_judged_at_the_dram_size_in_float32(user_ops):
    def result(shape, pass_, impl, us, dtype="float32", threads=2):
        return dict(
            op="my_op", shape=shape, dtype=dtype, threads=threads, pass_=pass_, impl=impl, us=us
        )

    rows = [
        # the cache size and bfloat16 would meet everything; only dram float32 counts
        result([64, 4096], "fwd", "opbridge_torch", 1.0),
        result([64, 4096], "fwd", "torch_compile", 9.0),
        result([8192, 4096], "fwd", "opbridge_torch", 1.0, dtype="bfloat16"),
        result([8192, 4096], "fwd", "torch_compile", 9.0, dtype="bfloat16"),
        result([8192, 4096], "fwd", "opbridge_torch", 100.0),
        result([8192, 4096], "fwd", "torch_compile", 90.0),
        result([8192, 4096], "fwd", "copy", 80.0),
        result([8192, 4096], "fwd+bwd", "opbridge_torch", 100.0),
        result([8192, 4096], "fwd+bwd", "torch_compile", 120.0),
        result([8192, 4096], "fwd", "opbridge_torch", 100.0, threads=1),
        result([8192, 4096], "fwd", "copy", 70.0, threads=1),
    ]
    report = {
        "sizes": {"cache": [64, 4096], "dram": [8192, 4096]},
        "results": [
            {
                **{k: v for k, v in r.items() if k not in ("pass_", "us")},
                "pass": r["pass_"],
                "median_us": r["us"],
                "p99_us": r["us"],
                "gbps": 1.0,
            }
            for r in rows
        ],
    }
    got = {
        (v["threads"], v["target"]): (round(v["measured"], 2), v["met"])
        for v in user_ops.verdicts(report)
    }
    assert got == {
        (2, "fwd: opbridge_torch vs torch_compile"): (0.9, False),
        (2, "fwd: opbridge_torch share of copy bandwidth"): (0.8, True),
        (2, "fwd+bwd: opbridge_torch vs torch_compile"): (1.2, True),
        (1, "fwd: opbridge_torch share of copy bandwidth"): (0.7, False),
    }


def test_gated_rope_is_judged_in_bfloat16_too_at_half_the_copy_bandwidth(user_ops):
    def result(dtype, impl, us):
        return dict(
            op="myops::gated_rope",
            shape=[8192, 4096],
            dtype=dtype,
            threads=2,
            impl=impl,
            median_us=us,
            p99_us=us,
            gbps=1.0,
        )

    report = {
        "sizes": {"dram": [8192, 4096]},
        "results": [
            {**result(dtype, impl, us), "pass": "fwd"}
            for dtype in ("float32", "bfloat16")
            for impl, us in (("opbridge_torch", 100.0), ("copy", 60.0), ("torch_compile", 150.0))
        ],
    }
    got = {(v["dtype"], v["target"]): v["met"] for v in user_ops.verdicts(report)}
    assert got == {
        ("float32", "fwd: opbridge_torch vs torch_compile"): True,
        ("float32", "fwd: opbridge_torch share of copy bandwidth"): False,  # 60% < 75%
        ("bfloat16", "fwd: opbridge_torch vs torch_compile"): True,
        ("bfloat16", "fwd: opbridge_torch share of copy bandwidth"): True,  # 60% >= 50%
    }
