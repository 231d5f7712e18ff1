"""The module names opbridge had before its layers, kept working.

``import opbridge.ort`` (or ``opbridge.onnx``, ``opbridge.testing``, ...) gives
the module that now holds those names, itself rather than a copy: one module
object under two names, so ``opbridge.ort.InferenceSession`` and
``opbridge.runtimes.onnxruntime.InferenceSession`` are the same function and
monkeypatching either patches both.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

# Old name -> the module that holds its names now.
MOVED = {
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
    "opbridge.ops._builder": "opbridge.ops.builder",
    "opbridge.ops._contrib": "opbridge.ops.contrib",
}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system has given the module the alias's spec: it keeps its own.
        module.__spec__ = self._own_spec


def install() -> None:
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
