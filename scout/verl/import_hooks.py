"""Patching a module the moment it is imported, so that processes that never import it do not
pay for importing it here (verl's vLLM server, vLLM's layers, verl's FSDP engine). Standard
library only: the CPU platform imports it while verl's own ``__init__`` is still loading."""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType


class _PatchOnImport:
    """A meta-path finder that calls ``patch(module)`` right after ``name`` is imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]):
        self.name, self.patch = name, patch

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patch

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def patch_on_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Apply ``patch`` to module ``name`` now if it is loaded, else as soon as it is imported
    (once per module name: a second hook for the same module is not installed)."""
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))
