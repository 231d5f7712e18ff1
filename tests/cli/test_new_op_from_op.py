"""``opbridge new-op DIR --from-op NS::NAME --import MODULE``: the SDK project
of an operator opbridge did not build, written from its registered schema
and its card (the full walk, compilers and all, is the guide
docs/guides/from-cpp-extension.md, run by tests/test_docs_guides.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODULE = """
import torch
import opbridge

library = torch.library.Library("fromop", "DEF")
library.define(
    "blend(Tensor x, Tensor? w=None, float alpha=0.5, int steps=2, bool exact=False, "
    "str mode='fast') -> (Tensor y, Tensor mask)"
)
library.impl("blend", lambda x, w=None, alpha=0.5, steps=2, exact=False, mode="fast": (x, x), "CPU")
library.define("pairs(Tensor x, int[] sizes) -> Tensor")


def standard(b, x, w=None, alpha=0.5, steps=2, exact=False, mode="fast"):
    return x, x


def reference(x, w=None, alpha=0.5, steps=2, exact=False, mode="fast"):
    return x, x


opbridge.ops.register_card(
    opbridge.ops.Card(
        name="blend", namespace="fromop", call=torch.ops.fromop.blend,
        standard=standard, reference=reference,
    )
)
"""


def _new_op(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opbridge", "new-op", *args, "--import", "fromop_module"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_project_is_written_from_the_schema_and_the_card(tmp_path):
    (tmp_path / "fromop_module.py").write_text(MODULE)
    result = _new_op(tmp_path, "project", "--from-op", "fromop::blend", "--namespace", "blend_ops")
    assert result.returncode == 0, result.stdout + result.stderr
    project = tmp_path / "project"
    spec_h = (project / "csrc/blend/spec.h").read_text()
    assert '.Inputs({opbridge::Input("x"), opbridge::OptionalInput("w")})' in spec_h
    assert (
        '.Attrs({opbridge::Attr::Float("alpha", 0.5), opbridge::Attr::Int("steps", 2), '
        'opbridge::Attr::Bool("exact", false), opbridge::Attr::String("mode", "fast")})'
    ) in spec_h
    assert '.Outputs({"y", "mask"})' in spec_h
    assert "namespace blend_ops {" in spec_h
    kernel = (project / "csrc/blend/kernel.cpp").read_text()
    for line in (
        "const bool exact = args.attrs[2].number != 0.0;",
        "const std::string& mode = args.attrs[3].text;",
        "OPBRIDGE_RETURN_IF_ERROR(opbridge::OutputAs(kBlendSpec, args, 1, n_mask, &mask));",
        'return Status::Error("blend_ops::blend: its kernel is not written yet',
    ):
        assert line in kernel, line
    card = (project / "python/blend_ops/blend.py").read_text()
    assert 'def blend(x, w=None, alpha=0.5, steps=2, exact=False, mode="fast"):' in card or (
        "def blend(x, w=None, alpha=0.5, steps=2, exact=False, mode='fast'):" in card
    )
    assert "return torch.ops.blend_ops.blend.default(x, w, alpha, steps, exact, mode)" in card
    assert "# standard and reference: copied from the card of fromop::blend" in card
    compile(card, "blend.py", "exec")  # the copied functions are valid Python
    assert (
        "test_gradcheck: once spec.h gives the operator a backward."
        in (project / "tests/test_blend.py").read_text()
    )
    assert (project / "pyproject.toml").is_file() and (project / "CMakeLists.txt").is_file()


def test_an_operator_it_cannot_take_is_named(tmp_path):
    (tmp_path / "fromop_module.py").write_text(MODULE)
    unknown = _new_op(tmp_path, "a", "--from-op", "fromop::nothing")
    assert unknown.returncode == 2
    assert "no operator torch.ops.fromop.nothing in this process" in unknown.stdout
    unsupported = _new_op(tmp_path, "b", "--from-op", "fromop::pairs")
    assert unsupported.returncode == 2
    assert "fromop::pairs: argument 'sizes' is a List[int]" in unsupported.stdout
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
