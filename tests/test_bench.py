"""The benchmark runs end to end in its quick mode (tiny sizes, few calls).
Timings on a shared machine mean nothing here: only the output's form is
checked."""

from __future__ import annotations

import json

from opbridge import bench
from opbridge.__main__ import main

KEYS = {"op", "shape", "dtype", "threads", "pass", "impl", "median_us", "p99_us", "gbps"}


def test_quick_benchmark_writes_json_table_and_plot(tmp_path, capsys):
    out, png, md = tmp_path / "bench.json", tmp_path / "bench.png", tmp_path / "bench.md"
    assert (
        main(["bench", "--quick", "--json", str(out), "--plot", str(png), "--markdown", str(md)])
        == 0
    )
    report = json.loads(out.read_text())
    assert report["copy_gbps"] > 0
    results = report["results"]
    assert all(set(r) >= KEYS for r in results)
    assert {r["impl"] for r in results} == set(bench.IMPLS)
    assert {r["op"] for r in results} == set(bench.OPS) | {"demo_model"}
    # No PyTorch built-in exists for these two: the row has no torch_builtin.
    for op in ("rotary_embedding", "normalize_image"):
        assert "torch_builtin" not in {r["impl"] for r in results if r["op"] == op}
    assert {r["pass"] for r in results} == {"fwd", "fwd+bwd"}
    assert {r["threads"] for r in results} >= {1}
    # ONNX Runtime has no backward here: only PyTorch implementations time fwd+bwd.
    assert {r["impl"] for r in results if r["pass"] == "fwd+bwd"} == set(bench.TORCH_IMPLS)
    assert all(r["median_us"] > 0 and r["p99_us"] >= r["median_us"] for r in results)
    assert png.stat().st_size > 0
    table = md.read_text()
    assert "| rms_norm | 1x64 | float32 | 1 | fwd |" in table
    assert "opbridge_torch" in capsys.readouterr().out
