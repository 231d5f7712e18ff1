"""A runtime's adapter is one folder, ``csrc/<name>_adapter/``, with its
sources and ``<name>.cmake``: the build finds it there, with no other edit
(docs/contributing.md, "Adding a runtime"). A toy adapter added to a scratch
copy of the checkout is built by opbridge's own library, installed with the
SDK and bundled, and a user's project (the SDK's CMake function over that
copy's sources, as the installed package's opbridgeConfig.cmake includes it)
takes it in ADAPTERS. Configure only, and the toy's one source built: no
kernel is compiled."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT

TOY_CMAKE = """\
# The toy adapter: <name>_toy, a library of the toy runtime.
include_guard(GLOBAL)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_ADAPTERS toy)

function(_opbridge_own_adapter_toy out_var)
  set(${out_var} TRUE PARENT_SCOPE)
endfunction()

function(_opbridge_sdk_part_toy target)
  add_library(${target} OBJECT "${OPBRIDGE_SDK_CSRC}/toy_adapter/toy.cpp")
endfunction()

function(_opbridge_adapter_toy name out_var)
  _opbridge_sdk_objects(toy _sdk_toy "toy 1.0")
  add_library(${name}_toy SHARED ${_sdk_toy})
  set(${out_var} ${name}_toy PARENT_SCOPE)
endfunction()
"""

TOY_CPP = """\
#include "opbridge/dtype.h"

extern "C" __attribute__((visibility("default"))) const char* OpbridgeToyDtype() {
  return opbridge::DtypeName(opbridge::Dtype::kFloat32);
}
"""

USER_PROJECT = """\
cmake_minimum_required(VERSION 3.25)
project(mylib LANGUAGES CXX)
set(OPBRIDGE_SDK_CSRC "{csrc}")
set(OPBRIDGE_SDK_VERSION 0.0.0)
set(OPBRIDGE_ORT_INCLUDE_DIR "{ort_headers}")
include("{opbridge_cmake}")
opbridge_add_operator_library(mylib SOURCES "{csrc}/ops/rms_norm/spec.cpp" ADAPTERS toy)
"""


def _cmake(*args) -> str:
    result = subprocess.run(["cmake", *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _generator() -> list[str]:
    ninja = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")
    return ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The checkout's build files and sources (linked), and a toy adapter's
    folder beside the others in its csrc/."""
    copy = tmp_path_factory.mktemp("toy-adapter")
    for name in ("CMakeLists.txt", "pyproject.toml", "cmake", "third_party", "examples"):
        (copy / name).symlink_to(ROOT / name)
    (copy / "csrc").mkdir()
    for entry in (ROOT / "csrc").iterdir():
        (copy / "csrc" / entry.name).symlink_to(entry)
    toy = copy / "csrc" / "toy_adapter"
    toy.mkdir()
    (toy / "toy.cmake").write_text(TOY_CMAKE)
    (toy / "toy.cpp").write_text(TOY_CPP)
    return copy


def test_a_new_adapter_folder_is_built_installed_and_bundled(checkout, tmp_path):
    build = tmp_path / "build"
    _cmake(
        "-S",
        checkout,
        "-B",
        build,
        *_generator(),
        "-DOPBRIDGE_BUILD_TORCH=OFF",
        "-DOPBRIDGE_BUILD_OPENVINO=OFF",
        "-DOPBRIDGE_WERROR=ON",
    )
    _cmake("--build", build, "--target", "opbridge_toy")
    assert (build / "libopbridge_toy.so").is_file()
    install = (build / "cmake_install.cmake").read_text()
    # Its folder goes into the SDK with the others, and its library is
    # installed and bundled with what it needs.
    assert f"{checkout}/csrc/toy_adapter" in install
    assert f"{checkout}/csrc/ort_adapter" in install
    assert "libopbridge_toy.so" in install.split("_opbridge_libraries", 1)[1].split(")", 1)[0]
    # Its SDK part is prebuilt with the package, for the build it fits.
    assert 'OPBRIDGE_PREBUILT_toy_FOR "' in (build / "prebuilt.cmake").read_text()
    assert ", toy 1.0" in (build / "prebuilt.cmake").read_text()


def test_a_users_library_takes_the_new_adapter(checkout, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    csrc = checkout / "csrc"
    ort_headers = ROOT / "third_party" / "onnxruntime" / "usr" / "include" / "onnxruntime"
    (project / "CMakeLists.txt").write_text(
        USER_PROJECT.format(
            csrc=csrc, ort_headers=ort_headers, opbridge_cmake=checkout / "cmake" / "opbridge.cmake"
        )
    )
    build = tmp_path / "build"
    _cmake("-S", project, "-B", build, *_generator())
    _cmake("--build", build, "--target", "mylib_toy")
    assert (build / "libmylib_toy.so").is_file()
