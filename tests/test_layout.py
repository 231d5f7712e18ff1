"""The package's layout: one name per module, routes and runtimes
come from their registries, and the lint refuses an import that runs up the
layers or in a circle."""

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib

import onnxruntime
import pytest
import torch

import opbridge
from opbridge import runtimes
from opbridge.bench.cases import runtime_settings
from opbridge.export import routes

from paths import ROOT

FORMER_NAMES = [
    "opbridge.onnx",
    "opbridge.ort",
    "opbridge.openvino",
    "opbridge.testing",
    "opbridge.build",
]


@pytest.mark.parametrize("former", FORMER_NAMES)
def test_former_module_names_are_gone(former):
    """One name per module: the names from before the layers import nothing."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(former)
    assert not hasattr(opbridge, former.split(".")[1])


def test_lint_refuses_a_second_name(tmp_path):
    """scripts/check_one_name.py (in ./dev lint) passes on the tree and
    refuses a module alias, a former name and a second dtype table."""
    check = ROOT / "scripts" / "check_one_name.py"
    ok = subprocess.run([sys.executable, str(check)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    code = (
        "import importlib.util, sys, types\n"
        f"spec = importlib.util.spec_from_file_location('check', {str(check)!r})\n"
        "check = importlib.util.module_from_spec(spec); spec.loader.exec_module(check)\n"
        "package = types.ModuleType('opbridge'); package.__all__ = ['onnx']\n"
        "import opbridge.export; package.onnx = opbridge.export\n"
        "assert check._aliases_of(package) == "
        "['opbridge.onnx is the module opbridge.export under a second name']\n"
        "assert check.FORMER_RE.search('import opbridge.ort as x').group(1) == 'opbridge.ort'\n"
        "assert check.FORMER_RE.search('opbridge.runtimes.onnxruntime') is None\n"
        "assert check.DTYPE_ENTRY_RE.search('    torch.bfloat16: \"bfloat16\",')\n"
        'assert check.DTYPE_ENTRY_RE.search(\'_T = {"bf16": "bfloat16"}\')\n'
        "assert check.DTYPE_ENTRY_RE.search('if dtype == \"bfloat16\":') is None\n"
        "assert check.CXX_DTYPE_ENTRY_RE.search('      return \"bfloat16\";')\n"
        "assert check.CXX_DTYPE_ENTRY_RE.search("
        "'  if (name == \"float16\") return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;')\n"
        "assert check.CXX_DTYPE_ENTRY_RE.search('      return \"bool\";') is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, cwd=tmp_path)


def test_the_dtype_table_matches_onnx_and_torch():
    """The element types in opbridge/_dtypes.py are ONNX's own, and every
    torch dtype maps back to its name."""
    import onnx

    from opbridge import _dtypes

    for name, element in _dtypes.ONNX.items():
        assert str(onnx.helper.tensor_dtype_to_np_dtype(element)) == name
        assert _dtypes.NAMES[_dtypes.TORCH[name]] == name


def test_the_cxx_dtype_table_is_the_python_one():
    """csrc/opbridge/dtype.h names each of _dtypes.py's dtypes with the same
    ONNX element type (its enum's values are ONNX's numbers)."""
    import re

    from opbridge import _dtypes

    text = (ROOT / "csrc" / "opbridge" / "dtype.h").read_text()
    numbers = {m[0]: int(m[1]) for m in re.findall(r"^\s*k(\w+) = (\d+),", text, re.M)}
    rows = dict(re.findall(r'\{Dtype::k(\w+), "(\w+)", \d+, (?:true|false)\}', text))
    cxx = {name: numbers[enumerator] for enumerator, name in rows.items()}
    for name, element in _dtypes.ONNX.items():
        assert cxx.get(name) == element, name


def test_optional_modules_are_imported_on_first_use():
    """A bare ``import opbridge`` imports neither OpenVINO nor the SDK's test
    helpers (a fresh process: another test may have imported them already)."""
    code = (
        "import sys, opbridge\n"
        "assert 'openvino' not in sys.modules and 'opbridge.sdk.testing' not in sys.modules\n"
        "import opbridge.runtimes.openvino, opbridge.sdk.testing\n"
        "assert opbridge.runtimes.openvino is sys.modules['opbridge.runtimes.openvino']\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_importing_opbridge_has_the_documented_effects_only():
    """The five import-time effects that opbridge's docstring lists, and no
    other finder, runtime package, transformers or torch.distributed.tensor
    (a fresh process: another test may have imported them already)."""
    code = (
        "import sys\n"
        "import torch\n"
        "finders = list(sys.meta_path)\n"
        "import opbridge\n"
        "from opbridge.export import _RESOLVERS\n"
        "from opbridge.ops.sharding import DTENSOR_MODULE\n"
        "added = [f for f in sys.meta_path if f not in finders]\n"
        "distributed = torch.distributed.is_available()\n"
        "ours = ['opbridge.ops.sharding'] * distributed + ['opbridge.runtimes.openvino',\n"
        "    'opbridge.export.translation']\n"
        "for package in ('onnxscript', 'onnx_ir'):\n"
        "    assert package not in sys.modules, package\n"
        "assert sorted(type(f).__module__ for f in added) == sorted(ours), added\n"
        "assert hasattr(torch.ops.opbridge, 'rms_norm')\n"
        "assert list(_RESOLVERS) == ['auto'], _RESOLVERS\n"
        "assert DTENSOR_MODULE not in sys.modules\n"
        "for package in ('onnxruntime', 'openvino', 'executorch', 'transformers'):\n"
        "    assert package not in sys.modules, package\n"
        "from torch.onnx._internal.torchscript_exporter import registration\n"
        "for name in opbridge.specs():\n"
        "    assert registration.registry.is_registered_op(f'opbridge::{name}', 18), name\n"
        "from torch.onnx._internal.exporter._registration import ONNXRegistry\n"
        "table = ONNXRegistry.from_torchlib()\n"
        "for name in opbridge.specs():\n"
        "    assert table.is_registered(getattr(torch.ops.opbridge, name).default), name\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_every_builtin_operator_is_called_by_its_name():
    """``opbridge.<op>`` and ``opbridge.ops.<op>`` are each built-in
    operator's call, listed in both ``__all__``, from the one registry of
    the calls (``opbridge.ops.catalog``)."""
    from opbridge.ops import card, catalog

    assert sorted(catalog.__all__) == sorted(opbridge.specs())

    for name in opbridge.specs():
        assert getattr(opbridge, name, None) is card(name).call, name
        assert getattr(opbridge.ops, name, None) is card(name).call, name
        assert name in opbridge.__all__ and name in opbridge.ops.__all__, name


def test_documented_names():
    import opbridge.sdk.testing

    assert opbridge.export.export is importlib.import_module("opbridge.export").export
    assert opbridge.runtimes.onnxruntime.InferenceSession is runtimes.onnxruntime.InferenceSession
    assert opbridge.sdk.build.load is importlib.import_module("opbridge.sdk.build").load
    assert callable(opbridge.patch) and callable(opbridge.verify)
    assert (
        opbridge.sdk.testing.check_export
        is importlib.import_module("opbridge.sdk.testing").check_export
    )


def test_route_registry_is_what_export_accepts():
    assert routes.choices() == ("custom", "standard", "ort", "function", "auto")
    assert routes.library_free() == ("standard", "ort", "function")
    assert [r.bench_name for r in routes.routes().values()] == [
        "custom",
        "standard",
        "fused",
        "function",
    ]
    with pytest.raises(
        ValueError,
        match=r"route must be one of \('custom', 'standard', 'ort', 'function', 'auto'\)",
    ):
        routes.get("nope")


@pytest.fixture
def extra_route(monkeypatch):
    """A route registered from outside: the standard form under another name."""
    monkeypatch.setattr(routes, "_REGISTERED", dict(routes._REGISTERED))
    standard = routes.get("standard")
    return routes.register_route(
        routes.Route(
            name="plain",
            needs_library=False,
            library_node=False,
            form=standard.form,
            own_form=lambda card: True,
            check=standard.check,
            bench_name="plain",
            label="plain route",
            summary="the standard form, registered under another name",
        )
    )


def test_a_registered_route_reaches_export_verify_auto_and_bench(extra_route):
    model = opbridge.nn.RMSNorm(8).eval()
    x = torch.randn(2, 8)
    proto = opbridge.export.export(model, (x,), route="plain", verbose=False)
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
    assert {p.key: p.value for p in proto.metadata_props}["opbridge.route"] == "plain"
    report = opbridge.verify(model, (x,), onnx_model=proto, draws=1, layers=False)
    assert report.passed, report.failures()
    assert any(c.name == "standard route: no opbridge node" for c in report.structure)
    choice = opbridge.autoroute.choose(model, (x,), timer=lambda *_: 1.0)
    assert "plain" in [c.route for c in choice.candidates]
    assert "ort_plain" in runtime_settings(runtimes.get("onnxruntime"))


def test_runtime_registry():
    assert runtimes.get("ort") is runtimes.get("onnxruntime") is runtimes.get()
    library = runtimes.get().library_path(opbridge.libraries()[0])
    assert library == opbridge.runtimes.onnxruntime.get_library_path()
    assert runtimes.names()[0] == "onnxruntime"
    with pytest.raises(ValueError, match=r"runtime must be one of \('onnxruntime',"):
        runtimes.get("tensorrt")


def test_verify_runs_in_a_registered_runtime(monkeypatch):
    """A runtime from outside (here ONNX Runtime again, at two levels of its
    own naming): verify uses its sessions and levels."""
    monkeypatch.setattr(runtimes, "_REGISTERED", dict(runtimes._REGISTERED))
    ort = runtimes.get("onnxruntime")
    levels = {"as_exported": "disable_all", "fast": "enable_all"}
    opened = []

    def session(model, level=None, threads=None):
        opened.append(level)
        return ort.session(model, level=levels[level or "fast"], threads=threads)

    runtimes.register_runtime(
        runtimes.Runtime(
            name="other",
            label="another runtime",
            short="other",
            session=session,
            levels=lambda: list(levels),
            base_level="as_exported",
            default_level="fast",
            version=lambda: onnxruntime.__version__,
            adapter="ort",
        )
    )
    model = opbridge.nn.ScaledClamp(0.5).eval()
    report = opbridge.verify(model, (torch.randn(3, 4),), route="custom", runtime="other", draws=1)
    assert report.passed, report.failures()
    assert report.runtime == "other" and report.levels == ["as_exported", "fast"]
    assert set(opened) == {"as_exported", "fast"}


def test_the_guide_lists_the_layers_the_lint_checks():
    """The contributing guide's list of the layers is the layers contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    expected = [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]
    guide = " ".join((ROOT / "docs" / "contributing.md").read_text().split())
    listed = guide.split("Each layer imports only the layers below it: ", 1)[1].split(". ", 1)[0]
    found = [[name.strip(" `") for name in layer.split("|")] for layer in listed.split(", ")]
    assert found == expected


def _package_copy(tmp_path):
    copy = tmp_path / "python"
    shutil.copytree(
        ROOT / "python" / "opbridge",
        copy / "opbridge",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
        copy_function=shutil.copy,  # new file times: no cache may take the copy for the original
    )
    return copy


def _lint(source, tmp_path):
    """``./dev lint``'s two import checks on the package under ``source``."""
    # Without site (-S): the editable install's finder would find the
    # checkout's package instead of the copy.
    packages = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), packages])}
    lint_imports = "import sys; from importlinter.cli import lint_imports_command as c; c()"
    config = str(ROOT / "pyproject.toml")
    layers = subprocess.run(
        [sys.executable, "-S", "-c", lint_imports, "--no-cache", "--config", config],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    script = str(ROOT / "scripts" / "check_import_cycles.py")
    cycles = subprocess.run(
        [sys.executable, "-S", script, str(source)], capture_output=True, text=True, env=env
    )
    return layers, cycles


def test_the_lint_passes_on_the_package_and_fails_on_a_cycle_or_an_upward_import(tmp_path):
    source = _package_copy(tmp_path)
    layers, cycles = _lint(source, tmp_path)
    assert layers.returncode == 0, layers.stdout + layers.stderr
    assert cycles.returncode == 0, cycles.stderr

    # A function-level import from export's options back into export: a circle.
    options = source / "opbridge" / "export" / "options.py"
    original = options.read_text()
    options.write_text(
        original
        + "\n\ndef _planted():\n    from opbridge.export import export\n\n    return export\n"
    )
    _, cycles = _lint(source, tmp_path)
    assert cycles.returncode == 1
    assert "opbridge.export.options -> opbridge.export" in cycles.stderr
    options.write_text(original)

    # ops importing verify runs up the layers.
    card = source / "opbridge" / "ops" / "_card.py"
    card.write_text(
        card.read_text()
        + "\n\ndef _planted():\n    from opbridge.verify import verify\n\n    return verify\n"
    )
    layers, _ = _lint(source, tmp_path)
    assert layers.returncode != 0
    assert "opbridge.ops is not allowed to import opbridge.verify" in layers.stdout
