"""Folders made once per test session and shared by every pytest-xdist worker.

A session fixture runs once in each worker; what is costly to make (a real lock, a venv, a
compiled extension) is made instead by the first worker that asks, under a file lock beside the
workers' own temporary folders, and reused by the others. A folder left half made by a killed
session is not reused: the marker that says it is complete is written last.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this session can see: the parent of a worker's own base folder
    under pytest-xdist, the session's base folder without it."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    shared = root / "shared"
    shared.mkdir(exist_ok=True)
    return shared


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """``shared_root/name``, filled by ``make(folder)`` once for the whole session; later calls,
    from any worker, wait for it and return the same folder."""
    root = shared_root(factory)
    folder, complete = root / name, root / f"{name}.made"
    with FileLock(str(root / f"{name}.lock")):
        if not complete.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            complete.touch()
    return folder
