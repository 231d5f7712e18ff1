"""Runs the range check's cases in a scratch environment that holds only
onnxruntime and numpy (scripts/check_ort_range.py prepares the cases and
starts this script with that environment's Python).

    python ort_range_runner.py LIBRARY CASES_DIR             # every case must match
    python ort_range_runner.py LIBRARY CASES_DIR --refused   # registering must fail

CASES_DIR holds cases.json (one entry per model: file, input names, the
.npz of inputs and expected outputs, tolerances) and the files it names.
Prints one line per failure and a summary; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

LEVELS = {
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "enable_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session(library: str, model: Path, level: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.register_custom_ops_library(library)
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def run_case(library: str, root: Path, case: dict) -> list[str]:
    """The failures of one case, at every optimization level."""
    data = np.load(root / case["data"])
    failures = []
    for level in LEVELS:
        try:
            sess = session(library, root / case["model"], level)
            got = sess.run(None, {name: data[f"in_{name}"] for name in case["inputs"]})
        except Exception as error:  # the runtime's message is the finding
            failures.append(f"{case['name']} [{level}]: {type(error).__name__}: {error}")
            continue
        for k, value in enumerate(got):
            expected = data[f"out_{k}"]
            if value.dtype != expected.dtype or value.shape != expected.shape:
                failures.append(
                    f"{case['name']} [{level}] output {k}: expected "
                    f"{expected.dtype}{list(expected.shape)}, got {value.dtype}{list(value.shape)}"
                )
                continue
            actual = value.astype(np.float64)
            wanted = expected.astype(np.float64)
            bad = np.abs(actual - wanted) > case["atol"] + case["rtol"] * np.abs(wanted)
            if bad.any() or np.isnan(actual).sum() != np.isnan(wanted).sum():
                worst = float(np.nanmax(np.abs(actual - wanted))) if actual.size else 0.0
                failures.append(
                    f"{case['name']} [{level}] output {k}: {int(bad.sum())} of {actual.size} "
                    f"elements differ by more than atol {case['atol']} + rtol {case['rtol']} "
                    f"(max abs diff {worst:.3g})"
                )
    return failures


def check_refused(library: str, expected: list[str]) -> list[str]:
    """Registering the library must fail with opbridge's own message, which
    names this runtime and the supported floor."""
    options = ort.SessionOptions()
    try:
        options.register_custom_ops_library(library)
    except Exception as error:
        message = str(error)
        missing = [text for text in expected if text not in message]
        if missing:
            return [f"the refusal does not say {missing}: {message}"]
        print(f"onnxruntime {ort.__version__} refused, as it must: {message}")
        return []
    return [f"onnxruntime {ort.__version__} registered the library; it must refuse it"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library")
    parser.add_argument("cases", type=Path)
    parser.add_argument("--refused", action="store_true")
    args = parser.parse_args()
    manifest = json.loads((args.cases / "cases.json").read_text())
    if args.refused:
        failures = check_refused(args.library, manifest["refusal_must_name"] + [ort.__version__])
    else:
        failures = []
        for case in manifest["cases"]:
            failures += run_case(args.library, args.cases, case)
        print(
            f"onnxruntime {ort.__version__} (numpy {np.__version__}): "
            f"{len(manifest['cases'])} models x {len(LEVELS)} optimization levels, "
            f"{len(failures)} failure(s)"
        )
    for failure in failures:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
