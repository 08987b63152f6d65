"""Air-gapped use: whether uv may reach the network, and whether it may download a Python.

``--offline`` (lock, build) sets uv's own variable, UV_OFFLINE, so that every uv run of the
process reads it; a UV_OFFLINE already in the environment is honoured the same way.
UV_PYTHON_DOWNLOADS (uv's ``python-downloads`` setting) of ``never`` or ``manual`` keeps uv from
downloading an interpreter; offline implies it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

_TRUE = {"1", "true", "yes", "on", "y", "t"}


def go_offline(environ: dict[str, str] | None = None) -> None:
    """Make this process and the tools it runs (uv) work from local caches only."""
    target = os.environ if environ is None else environ
    target["UV_OFFLINE"] = "1"


def is_offline(environ: Mapping[str, str]) -> bool:
    return environ.get("UV_OFFLINE", "").strip().lower() in _TRUE


def python_downloads_off(environ: Mapping[str, str]) -> str | None:
    """Why uv will not download a missing Python (the setting that says so), or None when it may."""
    if is_offline(environ):
        return "offline (--offline or UV_OFFLINE)"
    setting = environ.get("UV_PYTHON_DOWNLOADS", "").strip().lower()
    if setting in ("never", "manual"):
        return f"UV_PYTHON_DOWNLOADS={setting}"
    if (
        environ.get("UV_PYTHON_PREFERENCE", "").strip().lower() == "only-system"
        or environ.get("UV_NO_MANAGED_PYTHON", "").strip().lower() in _TRUE
    ):
        return "uv is told to use system Pythons only (UV_PYTHON_PREFERENCE / UV_NO_MANAGED_PYTHON)"
    return None
