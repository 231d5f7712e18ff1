"""``--import MODULE`` on every command that loads a model or an operator
library, with a clear error when the import fails; quantize and package
refuse a model whose domain no loaded library provides, saying that
``--import`` loads one."""

from __future__ import annotations

import re

import onnx
import pytest
from onnx import TensorProto, helper

from opbridge.__main__ import main

# Each command with the arguments it needs to parse (the import comes first).
COMMANDS = {
    "bench": [],
    "doctor": [],
    "export": ["demo", "out.onnx", "--route", "custom"],
    "package": ["--triton", "repo", "m.onnx"],
    "quantize": ["m.onnx", "out.onnx", "--dynamic"],
    "verify": ["demo", "--route", "custom"],
}


def _user_domain_model(path):
    """A model with one node of a domain no loaded library provides."""
    node = helper.make_node("FusedNorm", ["x"], ["y"], domain="com.example.myops")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.example.myops", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_model_command_takes_import_and_names_a_missing_module(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    status = main([command, *COMMANDS[command], "--import", "no_such_op_library"])
    err = capsys.readouterr().err
    assert status == 2, err
    # (verify's messages say "error:" after the command's name)
    expected = rf"opbridge {command}: (error: )?--import no_such_op_library: no module named"
    assert re.search(expected, err), err


def test_a_module_that_fails_while_importing_is_named_with_its_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_ops.py").write_text(
        "raise OSError('libbroken_ops_ort.so: cannot open shared object file')\n"
    )
    _user_domain_model(tmp_path / "m.onnx")
    status = main(["package", "--triton", "repo", "m.onnx", "--import", "broken_ops"])
    err = capsys.readouterr().err
    assert status == 2
    assert (
        "opbridge package: --import broken_ops: importing it failed: OSError: "
        "libbroken_ops_ort.so: cannot open shared object file" in err
    )


# verify reads a saved model with --onnx.
SAVED_MODEL_ARGS = {**COMMANDS, "verify": ["demo", "--onnx", "m.onnx", "--route", "custom"]}


@pytest.mark.parametrize("command", ["package", "quantize", "verify"])
def test_a_model_of_an_unloaded_library_is_refused_saying_import_loads_it(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    _user_domain_model(tmp_path / "m.onnx")
    status = main([command, *SAVED_MODEL_ARGS[command]])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "load its library first with --import MODULE" in err
    assert "opbridge.load_library" not in err
    assert err.rstrip().endswith("Unknown domain: 'com.example.myops'")
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "repo").exists()


def test_verify_of_a_missing_or_unreadable_onnx_file_is_a_one_line_error(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    for name, expected in [("missing.onnx", "No such file"), ("garbage.onnx", "not a readable")]:
        status = main(["verify", "demo", "--onnx", name, "--route", "custom"])
        err = capsys.readouterr().err
        assert status == 2, err
        assert err.startswith("opbridge verify: error: ") and expected in err, err
        assert "Traceback" not in err
