"""Models and data named on a command line: ``path/to/file.py:function``, a
function that builds them, loaded from the user's own file."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

FACTORY_FORM = "'path/to/file.py:function' (a function returning (model, example_inputs))"


class FactoryError(ValueError):
    """A model factory that cannot be loaded or called."""


# (resolved path, mtime, size) -> the module loaded from that file
_LOADED: dict[tuple, object] = {}


def load_factory(
    text: str, argument: str = "model", named: dict[str, Callable] | None = None
) -> Callable[[], tuple]:
    """The function named by ``path/to/file.py:function``, or ``named[text]``
    (the command line names the demo model ``demo``); errors name
    ``argument`` (the command-line argument it came from)."""
    if named and text in named:
        return named[text]
    path_text, sep, name = text.rpartition(":")
    if not sep or not path_text or not name:
        raise FactoryError(f"{argument}: expected {FACTORY_FORM}, got {text!r}")
    path = Path(path_text)
    if path.suffix != ".py":
        raise FactoryError(
            f"{argument}: expected a Python file before ':' in {FACTORY_FORM}, got {path_text!r}"
        )
    if not path.is_file():
        raise FactoryError(f"{argument}: the file {path_text!r} (from {text!r}) does not exist")
    if not name.isidentifier():
        raise FactoryError(f"{argument}: expected a function name after ':', got {name!r}")
    module_name = f"opbridge_model_{path.stem}"
    # A file loaded before and unchanged since (the model's file again, for
    # --reference) is the same module: its classes are the same, and its
    # top-level code runs once.
    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    module = _LOADED.get(key)
    if module is None or sys.modules.get(module_name) is not module:
        module = _import_file(module_name, path, path_text, argument)
        _LOADED[key] = module
    factory = getattr(module, name, None)
    if not callable(factory):
        defined = sorted(
            key
            for key, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module_name
        )
        raise FactoryError(
            f"{argument}: {path_text!r} has no function {name!r} (it defines {defined or 'none'})"
        )
    return factory


def _import_file(module_name: str, path: Path, path_text: str, argument: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would (dataclasses and pickling
    # look their module up there); its folder comes first so that it can
    # import its neighbours.
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise FactoryError(f"{argument}: importing {path_text!r} failed: {error!r}") from error
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def build_model(text: str, argument: str = "model", named: dict[str, Callable] | None = None):
    """Calls the factory; returns ``(model, args)`` with ``args`` a tuple.
    Errors name ``argument`` (the command-line argument ``text`` came from)."""
    import torch

    factory = load_factory(text, argument, named)
    try:
        inspect.signature(factory).bind()
    except TypeError as error:
        raise FactoryError(
            f"{argument}: {text!r} must be callable without arguments ({error})"
        ) from error
    except ValueError:
        pass  # no signature to inspect (a builtin); calling it will tell
    built = factory()
    if not (isinstance(built, tuple | list) and len(built) == 2):
        raise FactoryError(
            f"{argument}: {text!r} must return (model, example_inputs), got {type(built).__name__}"
            + (f" of length {len(built)}" if isinstance(built, tuple | list) else "")
        )
    model, args = built
    if not isinstance(model, torch.nn.Module):
        raise FactoryError(
            f"{argument}: {text!r} returned {type(model).__name__} as the model; "
            "expected a torch.nn.Module"
        )
    if isinstance(args, torch.Tensor):
        args = (args,)
    elif isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise FactoryError(
            f"{argument}: {text!r} returned {type(args).__name__} as example inputs; "
            "expected a tensor or a tuple of them"
        )
    return model, args
