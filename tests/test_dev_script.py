"""./dev checks the installed versions against requirements.txt on every run
(scripts/check_pins.py), not only when requirements.txt changes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
_spec = importlib.util.spec_from_file_location("check_pins", ROOT / "scripts" / "check_pins.py")
check_pins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_pins)


def test_reads_exact_pins_only():
    text = (
        "# pins\ntorch==2.13.0\n\nJinja2 == 3.1.6  # templating\nloose>=1\n"
        "onnx==1.23.1 ; python_version>'3'\n"
    )
    assert check_pins.read_pins(text) == {"torch": "2.13.0", "Jinja2": "3.1.6", "onnx": "1.23.1"}


def test_names_what_drifted():
    pins = {"torch": "2.13.0", "onnx": "1.23.1", "numpy": "2.4.6"}
    installed = {"torch": "2.12.0", "onnx": "1.23.1"}
    assert check_pins.drift(pins, installed.get) == [
        "torch: installed 2.12.0, pinned 2.13.0",
        "numpy: not installed, pinned 2.4.6",
    ]


def test_local_version_label_satisfies_a_plain_pin():
    assert check_pins.drift({"torch": "2.13.0"}, {"torch": "2.13.0+cpu"}.get) == []
    assert check_pins.drift({"torch": "2.13.0+cpu"}, {"torch": "2.13.0"}.get) == [
        "torch: installed 2.13.0, pinned 2.13.0+cpu"
    ]


@pytest.mark.parametrize("requirements", ["requirements.txt", "requirements-nodeps.txt"])
def test_this_environment_matches_requirements(requirements):
    # What ./dev runs before every command; it exits 1 and lists the drift otherwise.
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_pins.py"), str(ROOT / requirements)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def _function(dev: str, name: str) -> str:
    body = dev[dev.index(f"{name}() {{") :]
    return body[: body.index("\n}\n")]


def test_dev_checks_installed_versions_on_every_run():
    dev = (ROOT / "dev").read_text()
    setup_venv = _function(dev, "setup_venv")
    assert "install_pins requirements.txt\n" in setup_venv
    assert "install_pins requirements-nodeps.txt --no-deps" in setup_venv
    install_pins = _function(dev, "install_pins")
    assert 'scripts/check_pins.py "$file"' in install_pins
    assert "stamp_ok" not in setup_venv + install_pins


def test_timm_environment_differs_from_the_main_one_only_where_it_must():
    main = check_pins.read_pins((ROOT / "requirements.txt").read_text())
    timm = check_pins.read_pins((ROOT / "requirements-timm.txt").read_text())
    assert {k: timm[k] for k in ("torch", "torchvision", "timm")} == {
        "torch": "2.14.1",
        "torchvision": "0.29.1",
        "timm": "1.0.31",
    }
    differ = {name for name in set(main) & set(timm) if main[name] != timm[name]}
    assert differ == {"torch"}, differ
