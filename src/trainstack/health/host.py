"""Host facts for level 1: the size of /dev/shm and free disk. Read at the edge, judged in level1."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3


@dataclass(frozen=True)
class Space:
    path: str
    gib: float | None
    reason: str = ""


def shm_size(path: Path = Path("/dev/shm")) -> Space:
    """Total size of the shared-memory mount: NCCL and data-loader workers allocate from it."""
    return _usage(path, total=True)


def disk_free(path: Path) -> Space:
    return _usage(path, total=False)


def _usage(path: Path, *, total: bool) -> Space:
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return Space(str(path), None, f"cannot stat {path}: {exc.strerror}")
    return Space(str(path), (usage.total if total else usage.free) / GIB)
