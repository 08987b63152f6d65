"""Compiler cache settings (ccache or sccache) as environment variables for compile steps."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.stackfile.models import CompilerCache

_LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")


def cache_dir(settings: CompilerCache, base: Path) -> Path | None:
    """Absolute cache directory (relative settings are taken from ``base``), None when disabled."""
    if settings.kind == "none":
        return None
    path = Path(settings.dir).expanduser()
    return path if path.is_absolute() else base / path


def compiler_cache_env(settings: CompilerCache, base: Path, *, launcher: bool | None = None) -> dict[str, str]:
    """Where the cache lives and how large it may grow; CMake launchers only when the program
    is there (``launcher=None``: look it up on PATH), since CMake fails on a missing launcher."""
    directory = cache_dir(settings, base)
    if directory is None:
        return {}
    if settings.kind == "sccache":
        env = {"SCCACHE_DIR": str(directory), "SCCACHE_CACHE_SIZE": settings.max_size}
    else:
        env = {"CCACHE_DIR": str(directory), "CCACHE_MAXSIZE": settings.max_size}
    if launcher is None:
        launcher = shutil.which(settings.kind) is not None
    if launcher:
        env.update({name: settings.kind for name in _LAUNCHERS})
    return env
