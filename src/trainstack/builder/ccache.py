"""Compiler cache settings (ccache or sccache) as environment variables for compile steps."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.errors import SpecError
from trainstack.stackfile.models import CompilerCache
from trainstack.stackfile.paths import stack_path

_LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")


def cache_dir(settings: CompilerCache, base: Path, stack_folder: Path | None = None) -> Path | None:
    """Absolute cache directory, None when disabled: a relative setting is taken from ``base``
    (the build directory); with ``stack_folder`` (the setting is the stack's) any other leads only
    where the stack path rule lets it, inside the stack's folder or the user's ~/.cache."""
    if settings.kind == "none":
        return None
    if stack_folder is None:  # trainstack's own setting (the image's cache mount)
        path = Path(settings.dir)
    else:
        try:
            path = stack_path(settings.dir, stack_folder, "build.compiler_cache.dir")
        except ValueError as exc:
            raise SpecError(f"build.compiler_cache.dir: {exc}") from None
    return path if path.is_absolute() else base / path


def compiler_cache_env(
    settings: CompilerCache, base: Path, *, launcher: bool | None = None, stack_folder: Path | None = None
) -> dict[str, str]:
    """Where the cache lives and how large it may grow; CMake launchers only when the program
    is there (``launcher=None``: look it up on PATH), since CMake fails on a missing launcher."""
    directory = cache_dir(settings, base, stack_folder)
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
