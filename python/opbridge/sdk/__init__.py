"""The SDK for a user's own operators: the JIT build
(:mod:`~opbridge.sdk.build`), the checks every operator should pass
(:mod:`~opbridge.sdk.testing`), the project scaffold
(:mod:`~opbridge.sdk.scaffold`, its templates under ``templates/``), the
generated operator reference (:mod:`~opbridge.sdk.docs`) and the loader of
models named on a command line (:mod:`~opbridge.sdk.factory`). The C++ side
(headers, sources, CMake package) is installed beside it."""

# Imported with the package, so that opbridge.sdk.build.load works after a
# bare ``import opbridge``; the other modules load on first use.
from opbridge.sdk import build

__all__ = ["build"]
