"""trainstack's own dependencies for a bench worker started in another environment's Python
(``bench --in``): found in the environment of the trainstack that started it, by name, only
after the environment's own packages. Everything else (torch, transformers, numpy, ...) comes
from the environment alone, so that a row measures that environment.

Runs inside the worker before anything but the standard library is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys

VARIABLE = "TRAINSTACK_BENCH_RUNTIME"  # os.pathsep-joined site folders of the starting environment
# top-level modules of the pure helpers the worker imports (trainstack's own dependencies)
NAMES = frozenset({"packaging", "pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions"})


class _Fallback(importlib.abc.MetaPathFinder):
    """Finds a top-level module of ``NAMES`` in ``folders``; last on sys.meta_path."""

    def __init__(self, folders: list[str]) -> None:
        self.folders = folders

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or fullname not in NAMES:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, self.folders)


def folders() -> list[str]:
    return [f for f in os.environ.get(VARIABLE, "").split(os.pathsep) if f]


def install() -> None:
    """Where the starting environment named its site folders: the fallback finder, last."""
    found = folders()
    if found and not any(isinstance(f, _Fallback) for f in sys.meta_path):
        sys.meta_path.append(_Fallback(found))


def borrowed() -> dict[str, str]:
    """The distributions this process imported through the fallback, with their versions."""
    chosen = folders()
    used = {
        name
        for name in NAMES
        if name in sys.modules and any(str(getattr(sys.modules[name], "__file__", "") or "").startswith(f) for f in chosen)
    }
    wanted = {name.replace("_", "-").lower() for name in used}
    return {
        dist.metadata["Name"]: dist.version
        for dist in importlib.metadata.distributions(path=chosen)
        if str(dist.metadata["Name"]).replace("_", "-").lower() in wanted
    }


def site_folders() -> str:
    """This (the starting) Python's site folders, for ``VARIABLE``."""
    return os.pathsep.join(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p))
