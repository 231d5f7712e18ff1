"""benchmarks/export_time.py runs: one export of each kind, its table and
ratio printed. Timings mean nothing in a test: only the report's form is
checked."""

from __future__ import annotations

import re
import subprocess
import sys

from paths import ROOT


def test_export_time_prints_both_kinds_and_their_ratio():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "export_time.py"), "--exports", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    rows = re.findall(r"^\| (built [^|]+) \| (\d+\.\d+) \|$", out, re.MULTILINE)
    assert [name for name, _ in rows] == [
        "built afresh per export (torch's own)",
        "built once per opset, copied",
    ], out
    assert all(float(seconds) > 0 for _, seconds in rows), out
    assert re.search(r"^speed-up: \d+\.\dx$", out, re.MULTILINE), out
