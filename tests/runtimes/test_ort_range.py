"""The supported ONNX Runtime range: one constant (csrc/opbridge/version.h),
read by `opbridge doctor` and by the range check (scripts/check_ort_range.py,
which `./dev test` runs in scratch environments; its refusal message is
checked by the C++ tests in csrc/tests/ort_runtime_version_test.cpp)."""

from __future__ import annotations

import importlib.util
import re

import onnxruntime
import pytest

from opbridge._library import _C
from opbridge.cli import doctor
from opbridge.runtimes.onnxruntime import ort_version_check

from paths import ROOT


def _range_check():
    spec = importlib.util.spec_from_file_location(
        "check_ort_range", ROOT / "scripts" / "check_ort_range.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_version_h_and_the_module_agree():
    header = (ROOT / "csrc" / "opbridge" / "version.h").read_text()
    floor = re.search(r"kOrtApiFloor = (\d+);", header).group(1)
    newest = re.search(r'kOrtNewestTested = "([0-9.]+)";', header).group(1)
    assert (int(floor), newest) == (_C.ORT_API_FLOOR, _C.ORT_NEWEST_TESTED)


def test_the_pins_are_the_constants_releases():
    check = _range_check()
    pins = check.read_pins()
    assert check.check_pins_match_constants(pins, _C.ORT_API_FLOOR, _C.ORT_NEWEST_TESTED) == []
    for packages in pins.values():
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", p) for p in packages)


def test_a_pin_that_moves_away_from_the_constant_is_named():
    check = _range_check()
    pins = check.read_pins()
    floor = _C.ORT_API_FLOOR
    moved = dict(pins, floor=[f"onnxruntime==1.{floor + 1}.0", "numpy==2.4.6"])
    problems = check.check_pins_match_constants(moved, floor, _C.ORT_NEWEST_TESTED)
    assert problems == [f"floor: version.h says 1.{floor}, ort-range.txt pins 1.{floor + 1}.0"]
    moved = dict(pins, newest=["onnxruntime==9.9.9", "numpy==2.4.6"])
    problems = check.check_pins_match_constants(moved, floor, _C.ORT_NEWEST_TESTED)
    assert problems == [f"newest: version.h says {_C.ORT_NEWEST_TESTED}, ort-range.txt pins 9.9.9"]


def test_pins_must_be_exact(tmp_path):
    check = _range_check()
    pins = tmp_path / "ort-range.txt"
    pins.write_text(
        "floor onnxruntime>=1.24\nnewest onnxruntime==1.32.0\nolder onnxruntime==1.23.2\n"
    )
    with pytest.raises(
        SystemExit, match=re.escape("expected NAME==VERSION, got 'onnxruntime>=1.24'")
    ):
        check.read_pins(pins)
    pins.write_text("floor onnxruntime==1.24.1\nnewest onnxruntime==1.32.0\n")
    with pytest.raises(SystemExit, match=r"no line for \['older'\]"):
        check.read_pins(pins)


def test_doctor_states_the_range_from_the_constant():
    facts, checks = doctor.diagnose()
    floor = f"1.{_C.ORT_API_FLOOR}"
    assert dict(facts)["supported ONNX Runtime"] == (
        f"{floor} (oldest) to {_C.ORT_NEWEST_TESTED} (newest tested)"
    )
    runtime = next(c for c in checks if c.name.startswith("ONNX Runtime is "))
    assert runtime.name == f"ONNX Runtime is {floor} or newer (C API {_C.ORT_API_FLOOR})"
    assert runtime.ok and onnxruntime.__version__ in runtime.detail


@pytest.mark.parametrize(
    ("version", "ok", "detail"),
    [
        ("1.{floor}.0", True, "onnxruntime 1.{floor}.0"),
        (
            "1.{below}.2",
            False,
            "onnxruntime 1.{below}.2 is older than 1.{floor}: the library refuses it",
        ),
        ("1.99.0", True, "onnxruntime 1.99.0 (newer than the newest tested, {newest})"),
        ("1.{floor}.1+cpu", True, "onnxruntime 1.{floor}.1+cpu"),
    ],
)
def test_doctor_judges_a_runtime_version(version, ok, detail):
    values = {
        "floor": _C.ORT_API_FLOOR,
        "below": _C.ORT_API_FLOOR - 1,
        "newest": _C.ORT_NEWEST_TESTED,
    }
    check = ort_version_check(version.format(**values), _C)
    assert (check.ok, check.detail) == (ok, detail.format(**values))


def test_dev_test_runs_the_range_check():
    dev = (ROOT / "dev").read_text()
    test_branch = dev.split("  test)", 1)[1].split(";;", 1)[0]
    assert "ort_range" in test_branch
    assert "scripts/check_ort_range.py" in dev.split("ort_range() {", 1)[1].split("}", 1)[0]
