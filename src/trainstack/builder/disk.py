"""Free disk, reported before every compile step and enforced against build.min_free_disk_gb."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.errors import DiskSpaceError

GB = 1024**3


def free_gb(path: Path) -> float:
    """Free space (GiB) on the filesystem that holds ``path`` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free / GB


def require_free_disk(path: Path, minimum_gb: float, step: str) -> float:
    """The free GiB at ``path``; DiskSpaceError with both numbers when it is below ``minimum_gb``."""
    free = free_gb(path)
    if free < minimum_gb:
        raise DiskSpaceError(
            f"{step}: only {free:.1f} GiB free on {path}, build.min_free_disk_gb is {minimum_gb:g}",
            hint="free some space or lower build.min_free_disk_gb in the stack file",
        )
    return free


def tree_size(path: Path) -> int:
    """Bytes of all regular files under ``path``, hard links and symlinks counted once / not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for item in path.rglob("*"):
        if item.is_symlink() or not item.is_file():
            continue
        st = item.stat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total
