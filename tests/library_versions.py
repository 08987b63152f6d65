"""Pythons with other versions of transformers and torch than this one's, for the tests that run
memplan, bench and run under the versions trainstack supports (transformers 4.46 to 5.x, torch
2.5 or newer).

Each is a uv venv made once and kept under $TRAINSTACK_TEST_VENVS (default:
.venv/transformers-versions in the repository, which git ignores and CI keeps for its run), so
the tests of a session, and a second run, share it; a venv is complete once its
``trainstack-ready`` file exists.

- ``transformers_python("4.46.2")``: that transformers over this Python's torch
  (a venv over this one's packages: tests/venvs.py): small, a few seconds from uv's cache.
- ``torch_python("2.5.1", "4.46.2")``: torch and transformers of their own, with trainstack's
  dependencies (trainstack itself comes from ``SRC`` through PYTHONPATH). PyPI's Linux x86_64
  torch is the CUDA build, which does not import without its nvidia-* packages, so a venv
  takes them too: 3.1 GB downloaded for torch 2.5.1 and for 2.7.1 (4.9 and 4.7 GiB installed),
  once into uv's cache (36 to 142 s each on the 2-core machine, by its load), then linked from
  it (a new venv from a filled cache: about 5 s).
- ``torch_alone_python("2.4.1")``: that torch's wheel alone over this Python's packages, for
  the refusal of a torch outside the range, which reads its version before importing it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainstack
from tests.venvs import venv_over_this_python

ROOT = Path(__file__).resolve().parent.parent
SRC = str(Path(trainstack.__file__).resolve().parent.parent)
VENVS = Path(os.environ.get("TRAINSTACK_TEST_VENVS") or ROOT / ".venv" / "transformers-versions")
INSTALL_SECONDS = 1200  # a cold cache downloads several GB for a CUDA build of torch


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    return uv


def _made(venv: Path, over_this_python: bool, packages: list[str]) -> str:
    """``venv``'s Python, the venv made with ``packages`` (over this Python's, where
    ``over_this_python``) where it is not complete."""
    uv = _uv()
    done = venv / "trainstack-ready"
    venv.parent.mkdir(parents=True, exist_ok=True)
    # one maker at a time: pytest-xdist's workers run test files that share a venv side by side
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(venv, ignore_errors=True)
            if over_this_python:
                venv_over_this_python(venv, uv=uv)
            else:
                subprocess.run([uv, "venv", "-q", str(venv), "--python", sys.executable], check=True, timeout=120)
            subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *packages], check=True, timeout=INSTALL_SECONDS)
            done.touch()
    return str(venv / "bin" / "python")


def transformers_python(version: str) -> str:
    """A venv's Python with transformers ``version`` and this Python's torch."""
    return _made(VENVS / version, True, [f"transformers=={version}"])


def torch_python(torch: str, transformers: str) -> str:
    """A venv's Python with torch ``torch`` and transformers ``transformers`` of its own."""
    return _made(VENVS / f"torch{torch}-transformers{transformers}", False, [f"torch=={torch}", f"transformers=={transformers}", "-r", str(ROOT / "pyproject.toml")])


def torch_alone_python(torch: str) -> str:
    """A venv's Python with torch ``torch``'s own wheel over this Python's packages, without the
    CUDA libraries it needs to import: for a refusal that reads the version before importing it."""
    return _made(VENVS / f"torch{torch}-alone", True, ["--no-deps", f"torch=={torch}"])


def env() -> dict[str, str]:
    """This environment with trainstack from ``SRC`` first on the path."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": SRC}
