"""Real small filesystems for the tests of full and read-only disks."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(place: Path, options: str) -> Iterator[Path]:
    """A real tmpfs mounted at ``place`` (made here) with the mount ``options`` ('size=64k',
    'ro,size=64k'), unmounted after; the test is skipped where this process may not mount
    (it needs root with mount rights; root ignores mode bits, so a read-only folder needs a
    read-only mount)."""
    place.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(place)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs ({options}) here: {done.stderr.strip() or 'mount failed'}")
    try:
        yield place
    finally:
        subprocess.run(["umount", "-l", str(place)], check=True)
