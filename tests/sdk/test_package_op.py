"""opbridge package-op's reading of a wheel (opbridge.sdk.package.inspect_wheel)
and opbridge check-op: what each refuses, on wheels made of opbridge's own
installed libraries. scripts/check_stable_abi.sh ships examples/fused_norm
end to end (package-op, install under another torch, check-op), and
tests/user_project.py runs check-op on the SDK tests' user projects."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import opbridge
from opbridge._library import native_dir
from opbridge.sdk.package import inspect_wheel

PYTHON = sys.executable
VERSION = opbridge._C.__version__
LIBRARIES = (
    "libhwy.so.1",
    "libopbridge_ort.so",
    "libopbridge_torch.so",
    "libopbridge_torch_kernels.so",
)


def make_wheel(
    folder: Path,
    *,
    leave_out: tuple[str, ...] = (),
    requires: tuple[str, ...] = (f"opbridge=={VERSION}",),
    patch: dict[str, tuple[bytes, bytes]] | None = None,
) -> Path:
    """A wheel of package my_pkg holding copies of opbridge's installed
    libraries (less ``leave_out``, ``patch``: file -> bytes replaced)."""
    native = native_dir()
    wheel = folder / "my_pkg-0.1.0-cp311-cp311-linux_x86_64.whl"
    metadata = "Metadata-Version: 2.1\nName: my_pkg\nVersion: 0.1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("my_pkg-0.1.0.dist-info/METADATA", metadata)
        archive.writestr("my_pkg/__init__.py", "")
        for name in LIBRARIES:
            if name in leave_out or not (native / name).is_file():
                continue
            data = (native / name).read_bytes()
            old, new = (patch or {}).get(name, (b"", b""))
            if old:
                assert data.count(old) == 1, f"{name}: {old!r} found {data.count(old)} times"
                data = data.replace(old, new)
            archive.writestr(f"my_pkg/{name}", data)
    return wheel


def test_a_wheel_that_carries_what_its_libraries_need_passes(tmp_path):
    report = inspect_wheel(make_wheel(tmp_path))
    assert report.problems == []
    roles = {Path(lib.path).name: lib.role for lib in report.libraries}
    assert roles["libopbridge_ort.so"] == "ONNX Runtime"
    assert roles["libopbridge_torch_kernels.so"].startswith("PyTorch kernels")
    assert "not in the wheel: " in report.table() and "OpenVINO" in report.table()


def test_a_needed_library_left_out_is_named(tmp_path):
    if not (native_dir() / "libhwy.so.1").is_file():
        pytest.skip("this build links Highway statically: no libhwy.so.1 to leave out")
    problems = inspect_wheel(make_wheel(tmp_path, leave_out=("libhwy.so.1",))).problems
    assert problems and all(
        "needs libhwy.so.1, which the wheel does not carry" in p for p in problems
    )
    assert any(p.startswith("my_pkg/libopbridge_ort.so") for p in problems), problems


def test_a_pytorch_library_without_its_kernels_library_is_refused(tmp_path):
    problems = inspect_wheel(
        make_wheel(tmp_path, leave_out=("libopbridge_torch_kernels.so",))
    ).problems
    assert (
        "libopbridge_torch.so without its kernels library libopbridge_torch_kernels.so" in problems
    )
    assert any("needs libopbridge_torch_kernels.so" in p for p in problems), problems


def test_no_onnxruntime_library_is_refused(tmp_path):
    problems = inspect_wheel(make_wheel(tmp_path, leave_out=("libopbridge_ort.so",))).problems
    assert problems == [
        "my_pkg-0.1.0-cp311-cp311-linux_x86_64.whl: no ONNX Runtime library (lib<name>_ort.so)"
    ]


def test_a_runpath_of_the_build_machine_is_refused(tmp_path):
    # The same length as "$ORIGIN": the file stays a valid ELF library.
    patch = {"libopbridge_ort.so": (b"\x00$ORIGIN\x00", b"\x00/b/libs\x00")}
    problems = inspect_wheel(make_wheel(tmp_path, patch=patch)).problems
    assert any(
        p.startswith("my_pkg/libopbridge_ort.so: its RUNPATH names /b/libs, a folder of the build")
        for p in problems
    ), problems


@pytest.mark.parametrize("requires", [(), ("opbridge>=0.1",), ("opbridge==0.0.9",)])
def test_a_wheel_must_require_the_opbridge_it_was_built_with(tmp_path, requires):
    problems = inspect_wheel(make_wheel(tmp_path, requires=requires)).problems
    assert (
        len(problems) == 1 and f'add "opbridge=={VERSION}" to [project] dependencies' in problems[0]
    )


def test_package_op_refuses_a_folder_without_a_project(tmp_path):
    result = subprocess.run(
        [PYTHON, "-m", "opbridge", "package-op", str(tmp_path), "-o", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and f"{tmp_path} has no pyproject.toml" in result.stderr


def test_check_op_refuses_a_package_without_an_opbridge_library():
    result = subprocess.run(
        [PYTHON, "-m", "opbridge", "check-op", "json"], capture_output=True, text=True
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "importing json loads no opbridge library" in result.stderr


def test_check_op_reports_every_failing_check(monkeypatch, capsys):
    from opbridge.sdk import testing

    monkeypatch.setattr(
        testing, "package_cards", lambda package: [opbridge.ops.cards()["opbridge::scaled_clamp"]]
    )

    def refuse(card):
        raise AssertionError(f"{card.name}: not this time")

    monkeypatch.setattr(testing, "PACKAGE_CHECKS", {"reference": refuse, "opcheck": refuse})
    with pytest.raises(AssertionError, match=r"2 checks failed") as failed:
        testing.check_package("opbridge", log=lambda line: None)
    assert str(failed.value).count("scaled_clamp: not this time") == 2


def test_a_new_project_requires_the_opbridge_it_is_written_with():
    import tomllib

    from opbridge.sdk.scaffold import files

    pyproject = tomllib.loads(files("soft_cap", "soft_cap_ops", "com.example.x")["pyproject.toml"])
    assert pyproject["project"]["dependencies"] == [f"opbridge=={VERSION}"]
