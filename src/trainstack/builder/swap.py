"""Swap a finished build into place atomically: readers see the old build or the new one, never neither."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trainstack.fsutil import exchange_dirs, replace_dir


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
    if exchange_dirs(staging, final):
        shutil.rmtree(staging, ignore_errors=True)
        return
    replace_dir(staging, final)
