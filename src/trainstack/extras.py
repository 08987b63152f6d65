"""Optional dependencies: which extra brings each one, and the one-line error when it is missing.

trainstack installs without torch; bench, memplan and health levels 2 and 3 need it. A verb
calls ``require`` before its heavy imports, and ``cli.main`` turns any other missing optional
module into the same one-line error.
"""

from __future__ import annotations

import importlib
import importlib.util

from trainstack.errors import ToolMissingError

# module -> what to install for it
INSTALL: dict[str, str] = {
    "torch": "pip install 'trainstack[torch]'",
    "transformers": "pip install transformers",
    "jsonschema": "pip install jsonschema",
    "securesystemslib": "pip install 'trainstack[provenance]'",
    "cryptography": "pip install 'trainstack[provenance]'",
}


class ExtraMissingError(ToolMissingError):
    """An optional Python dependency is not installed."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(module: str, needed_by: str) -> ExtraMissingError:
    how = INSTALL.get(module, f"pip install {module}")
    return ExtraMissingError(f"{needed_by} needs {module}, which is not installed", hint=f"install it with: {how}")


def require(module: str, needed_by: str) -> None:
    """Raise the one-line error naming the install command when ``module`` is not installed
    (found without importing it: a version range read from metadata can be checked next)."""
    if not installed(module):
        raise missing(module, needed_by)


def require_importable(module: str, needed_by: str) -> None:
    """Import ``module`` now, where a failure is one line: installed but failing at import (a
    CUDA build without its libraries, a wheel for another Python) would otherwise reach the
    verb as a traceback."""
    require(module, needed_by)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever a broken install raises becomes the message
        reason = " ".join((str(exc) or type(exc).__name__).split())[:100]
        raise ExtraMissingError(
            f"{needed_by} needs {module}, which is installed but cannot be imported: {reason}",
            hint=f"reinstall it: pip install --force-reinstall {module}",
        ) from None


def require_cuda(needed_by: str) -> None:
    """Raise the one-line error when torch sees no CUDA GPU (a CPU build of torch, or no GPU)."""
    import torch

    if torch.cuda.is_available():
        return
    why = "this torch is a CPU build" if torch.version.cuda is None else "torch sees no GPU"
    raise ToolMissingError(f"{needed_by} needs a CUDA GPU: {why}", hint="run with --device cpu, or on a machine with an NVIDIA GPU")


def from_import_error(exc: ModuleNotFoundError, verb: str | None) -> ExtraMissingError | None:
    """The one-line error for an optional dependency found missing at import time, else None."""
    top = (exc.name or "").split(".")[0]
    if top not in INSTALL or installed(top):
        return None
    return missing(top, f"trainstack {verb}" if verb else "trainstack")
