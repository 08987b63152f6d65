"""Swap a finished build into place atomically: readers see the old build or the new one, never neither."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

from trainstack.fsutil import replace_dir

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): both names swap in one step. False where unsupported."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        return False
    result = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0


def swap_into_place(staging: Path, final: Path) -> None:
    """Put ``staging`` at ``final``; the previous ``final`` (if any) is deleted afterwards.

    With an existing ``final`` the two directories are exchanged in one rename, so an
    interruption at any point leaves a complete build at ``final``; the old tree, now at
    ``staging``, is removed last (and by the next build if that removal was cut short).
    """
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, final)
        return
    if _renameat2_exchange(staging, final):
        shutil.rmtree(staging, ignore_errors=True)
        return
    replace_dir(staging, final)
