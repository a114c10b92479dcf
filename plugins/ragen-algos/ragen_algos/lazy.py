"""Torch, imported at its first use rather than when the plugin loads.

Every ``ragen`` command loads this plugin to learn its component names (``ragen plugins``, ``ragen envs``,
``ragen --help``); importing torch for that took seconds where the names need none of it. The estimators' module reads
``torch`` from here, so registering them imports nothing heavy and the first estimate imports torch."""

from __future__ import annotations

import importlib
import types


class LazyModule(types.ModuleType):
    """A stand-in for a module that imports it on the first attribute read (then every read goes to the module)."""

    def __init__(self, name: str):
        super().__init__(name)
        self._module: types.ModuleType | None = None

    def _load(self) -> types.ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self.__name__)
        return self._module

    def __getattr__(self, attr: str):
        return getattr(self._load(), attr)

    def __dir__(self):
        return dir(self._load())


torch = LazyModule("torch")
