"""What the environment a bench row was measured in holds: its Python, torch, torch's CUDA and the
version of every distribution whose modules the run imported, so that a reader can rebuild it.

Runs inside the worker (bench.worker), in whatever environment it was started in: the standard
library and the torch already imported, nothing else.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from trainstack.bench.runtime import borrowed

MAX_PACKAGES = 2000  # an environment's imported distributions; a bound on what a row carries


def imported_versions() -> dict:
    """``{"python", "executable", "torch", "cuda", "packages": {distribution: version}}`` of this
    process, the packages being those of the top-level modules imported so far."""
    owners = importlib.metadata.packages_distributions()
    top = {name.partition(".")[0] for name in list(sys.modules)}
    names = sorted({dist for module in top for dist in owners.get(module, ())}, key=str.lower)[:MAX_PACKAGES]
    packages = {}
    for name in names:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # a module whose distribution left no metadata
            continue
    torch = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": getattr(torch, "__version__", None),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "packages": packages,
        "borrowed": borrowed(),  # trainstack's helpers taken from the environment that started this one
    }
