"""The library versions memplan and ``bench --hf-config`` are proven with, and the one-line
refusal of any other: transformers 4.46 to 5.x (the CPU matrix in
benchmarks/results/memplan_families/memplan_families_matrix runs 4.46, 4.53, 4.57 and the
newest 5.x) and torch 2.5 and newer (the matrix runs 2.5.1, 2.7.1 and the newest). The versions are read from
the installed packages' metadata, so a torch outside the range is refused before it is
imported (a CUDA build without its libraries would fail there with a traceback)."""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.version import InvalidVersion, Version

from trainstack.errors import ToolMissingError

TRANSFORMERS_MIN, TRANSFORMERS_BELOW = Version("4.46"), Version("6")
TORCH_MIN = Version("2.5")
TRANSFORMERS_RANGE = "transformers 4.46 to 5.x"
TORCH_RANGE = "torch 2.5 or newer"


def _installed(name: str) -> str | None:
    module = sys.modules.get(name)
    found = getattr(module, "__version__", None) if module is not None else None
    if found is None:
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    return str(found)


def _release(text: str) -> Version | None:
    try:
        return Version(Version(text).base_version)  # 2.13.0+cpu, 5.0.0rc1 -> their release
    except InvalidVersion:
        return None


def check_transformers(verb: str = "memplan") -> None:
    """ToolMissingError (exit 6) where the installed transformers is outside the range; nothing
    where none is installed (the caller's import says that)."""
    found = _installed("transformers")
    if found is None:
        return
    version = _release(found)
    if version is None or not TRANSFORMERS_MIN <= version < TRANSFORMERS_BELOW:
        raise ToolMissingError(
            f"{verb} supports {TRANSFORMERS_RANGE}; found transformers {found}",
            hint=f"pip install 'transformers>={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}'",
        )


def check_torch(verb: str = "memplan") -> None:
    found = _installed("torch")
    if found is None:
        return
    version = _release(found)
    if version is None or version < TORCH_MIN:
        raise ToolMissingError(f"{verb} supports {TORCH_RANGE}; found torch {found}", hint=f"pip install 'torch>={TORCH_MIN}'")


def check_model_libraries(model: object, verb: str = "memplan") -> None:
    """torch, and transformers where the model is one of its classes."""
    check_torch(verb)
    if type(model).__module__.startswith("transformers."):
        check_transformers(verb)
