"""Run a callback right after a module is imported (or now, if it already is).

The tracer is injected before train.py runs, when torch may not be imported
yet; patching must wait for the module, and must not import it early (an
eager ``import torch`` would slow down every Python child of the worker).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading

_lock = threading.Lock()
_hooks: dict[str, list] = {}
_finder = None


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported. Callback errors are
    the callback's to handle; this module only guarantees the call."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    global _finder
    with _lock:
        _hooks.setdefault(name, []).append(callback)
        if _finder is None:
            _finder = _PostImportFinder()
            sys.meta_path.insert(0, _finder)


def _run_hooks(name: str, module) -> None:
    with _lock:
        callbacks = _hooks.pop(name, [])
    for callback in callbacks:
        callback(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of a watched module."""

    def __init__(self):
        self._resolving = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _hooks or getattr(self._resolving, "name", None) == fullname:
            return None
        self._resolving.name = fullname
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:
            return None
        finally:
            self._resolving.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _NotifyingLoader(spec.loader, fullname)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        # Code that later inspects module.__loader__ should see the real one.
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        _run_hooks(self._name, module)

    def __getattr__(self, attr):
        return getattr(self._inner, attr)
