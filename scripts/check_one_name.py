"""One name for each module: no alias machinery, no former module names.

Run by ``./dev lint``. It refuses:

- an import hook (``sys.meta_path``) anywhere in the package but the one
  that waits for another package's import and renames nothing
  (``_imports.py``: the DTensor sharding strategies, transformers' OpenVINO
  exporter);
- a module-level ``__getattr__`` in a package's ``__init__.py`` (the way a
  package answers for names it does not hold);
- a public name (``__all__``) of a package that is a module other than the
  package's own submodule of that name (``onnx = export``);
- a former module name (``opbridge.onnx``, ``opbridge.ort``, ...) in the
  code, the tests, the examples, the scripts or the documentation.
- a table of dtype names in the package but ``opbridge/_dtypes.py``'s, or
  in the C++ sources (an adapter or the SDK core turning a dtype's name into
  its runtime's type, or back) but ``csrc/opbridge/dtype.h``'s.

    .venv/bin/python scripts/check_one_name.py
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "opbridge"

# The names modules had before the package was layered; each lives only
# under the name on the right.
FORMER = {
    "opbridge.onnx": "opbridge.export",
    "opbridge.ort": "opbridge.runtimes.onnxruntime",
    "opbridge.openvino": "opbridge.runtimes.openvino",
    "opbridge.binding": "opbridge.runtimes.ort_binding",
    "opbridge.routes": "opbridge.autoroute",
    "opbridge.testing": "opbridge.sdk.testing",
    "opbridge.build": "opbridge.sdk.build",
    "opbridge.scaffold": "opbridge.sdk.scaffold",
    "opbridge.docs": "opbridge.sdk.docs",
    "opbridge.doctor": "opbridge.cli.doctor",
    "opbridge.export_cli": "opbridge.cli.export",
    "opbridge.verify.cli": "opbridge.cli.verify",
    "opbridge.quantize": "opbridge.deploy.quantize",
    "opbridge.package": "opbridge.deploy.triton",
    "opbridge.serve": "opbridge.deploy.serve",
    "opbridge.hf": "opbridge.integrations.hf",
    "opbridge.adoption": "opbridge.integrations.adoption",
    "opbridge.fusions": "opbridge.patching.fused",
    "opbridge.bench_models": "opbridge.bench.models",
    "opbridge.models": "opbridge.demo.models",
    "opbridge.ops._builder": "opbridge.export.builder",
    "opbridge.ops._contrib": "opbridge.export.contrib",
    "opbridge.ops.builder": "opbridge.export.builder",
    "opbridge.ops.contrib": "opbridge.export.contrib",
}
NAMING_FORMER = {"scripts/check_one_name.py", "tests/test_layout.py"}
IMPORT_HOOKS_ALLOWED = {"python/opbridge/_imports.py"}
# "opbridge.deploy.quantize: ..." opens the quantizer's messages (the function
# opbridge.deploy.quantize.quantize), which its tests assert word for word.
MESSAGE_PREFIXES = ("opbridge.deploy.quantize: ",)
FORMER_RE = re.compile(
    r"(?<![\w/.-])(" + "|".join(re.escape(name) for name in FORMER) + r")\b(?![-/])"
)
TEXT_SUFFIXES = (
    ".py",
    ".md",
    ".yml",
    ".yaml",
    ".in",
    ".toml",
    ".sh",
    ".txt",
    ".cpp",
    ".h",
    ".cmake",
)


def import_hooks() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "meta_path" in path.read_text() and rel not in IMPORT_HOOKS_ALLOWED:
            found.append(f"{rel}: an import hook (sys.meta_path)")
    return found


def module_getattrs() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a module-level __getattr__")
    return found


def module_aliases() -> list[str]:
    sys.path.insert(0, str(ROOT / "python"))
    import opbridge

    found = []
    for info in pkgutil.walk_packages(opbridge.__path__, "opbridge."):
        if not info.ispkg:
            continue
        try:
            package = importlib.import_module(info.name)
        except ImportError:  # an optional runtime absent here
            continue
        found += _aliases_of(package)
    return _aliases_of(opbridge) + found


def _aliases_of(package: types.ModuleType) -> list[str]:
    found = []
    for name in getattr(package, "__all__", ()):
        value = getattr(package, name, None)
        if isinstance(value, types.ModuleType) and value.__name__ != f"{package.__name__}.{name}":
            found.append(
                f"{package.__name__}.{name} is the module {value.__name__} under a second name"
            )
    return found


def former_names() -> list[str]:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for rel in files:
        # This file and the test of the rule name the former names on purpose.
        if rel.startswith("benchmarks/results/") or rel in NAMING_FORMER:
            continue
        if not rel.endswith(TEXT_SUFFIXES) and rel != "dev":
            continue
        path = ROOT / rel
        if not path.is_file():
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in FORMER_RE.finditer(line):
                found.append(
                    f"{rel}:{lineno}: {match.group(1)} (the module is {FORMER[match.group(1)]})"
                )
    return found


# A dict entry that maps a dtype's name to a dtype, a name or an element type,
# or back (bfloat16 is in every such table): "bfloat16": torch.bfloat16,
# "bf16": "bfloat16", torch.bfloat16: "bfloat16", "BFloat16": ...
DTYPE_ENTRY_RE = re.compile(
    r'"bfloat16"\s*:\s*(torch\.|"|\w+\.BFLOAT16|\d)|"\w+"\s*:\s*"bfloat16"'
    r'|torch\.bfloat16\s*:\s*"|"BFloat16"\s*:'
)
DTYPE_TABLE = "python/opbridge/_dtypes.py"


def dtype_tables() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == DTYPE_TABLE:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if DTYPE_ENTRY_RE.search(line):
                found.append(f"{rel}:{lineno}: a dtype table (the one table is {DTYPE_TABLE})")
    return found


# A C++ line that names a 16-bit float dtype (every dtype table has them) as
# one case of a mapping: `return "float16";` (a switch over a runtime's types)
# or `if (name == "bfloat16") return ...;`.
_DTYPE_NAME = r'"b?float16"'
CXX_DTYPE_ENTRY_RE = re.compile(
    rf"return\s+{_DTYPE_NAME}\s*;|==\s*{_DTYPE_NAME}\s*\)\s*return\s+[\w:]+\s*;"
)
CXX_DTYPE_TABLE = "csrc/opbridge/dtype.h"


def cxx_dtype_tables() -> list[str]:
    found = []
    for path in sorted((ROOT / "csrc").rglob("*")):
        if path.suffix not in {".h", ".cpp", ".cu", ".cuh"} or "tests" in path.parts:
            continue
        rel = path.relative_to(ROOT).as_posix()
        if rel == CXX_DTYPE_TABLE:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if CXX_DTYPE_ENTRY_RE.search(line):
                found.append(f"{rel}:{lineno}: a dtype table (the one table is {CXX_DTYPE_TABLE})")
    return found


def main() -> int:
    problems = (
        import_hooks()
        + module_getattrs()
        + module_aliases()
        + former_names()
        + dtype_tables()
        + cxx_dtype_tables()
    )
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            f"check_one_name: {len(problems)} second names (one name per module)", file=sys.stderr
        )
        return 1
    print("one name per module: no alias machinery, no former module names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
