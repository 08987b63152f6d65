"""Compiler cache settings (ccache or sccache) as environment variables for compile steps."""

from __future__ import annotations

from pathlib import Path

from trainstack.spec.models import CompilerCache


def cache_dir(settings: CompilerCache, base: Path) -> Path | None:
    """Absolute cache directory (relative settings are taken from ``base``), None when disabled."""
    if settings.kind == "none":
        return None
    path = Path(settings.dir).expanduser()
    return path if path.is_absolute() else base / path


def compiler_cache_env(settings: CompilerCache, base: Path) -> dict[str, str]:
    directory = cache_dir(settings, base)
    if directory is None:
        return {}
    if settings.kind == "sccache":
        # sccache sizes are e.g. "10G"; it also wraps rustc and nvcc when set as the launcher
        return {
            "SCCACHE_DIR": str(directory),
            "SCCACHE_CACHE_SIZE": settings.max_size,
            "CMAKE_C_COMPILER_LAUNCHER": "sccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
            "CMAKE_CUDA_COMPILER_LAUNCHER": "sccache",
        }
    return {
        "CCACHE_DIR": str(directory),
        "CCACHE_MAXSIZE": settings.max_size,
        "CMAKE_C_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache",
    }
